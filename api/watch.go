package api

import "time"

// Watching a lock (GET /locks/{resource} with after and wait_ms, or with
// Accept: text/event-stream).
const (
	// MediaEventStream is the media type of a watch stream (Server-Sent
	// Events).
	MediaEventStream = "text/event-stream"
	// ProblemTooManyWatchers is the type of the 429 answered when the
	// replica has its maximum number of watchers (-max-watchers).
	ProblemTooManyWatchers = "urn:lockgate:problem:too-many-watchers"
	// MaxWatchWaitMs bounds a long poll's wait_ms.
	MaxWatchWaitMs = 300000
)

// WatchEvent is the data of one event of a watch stream; the SSE event
// name is its kind (state, acquired, released, expired, force-released)
// and its id the fencing token. It never carries a lease id.
type WatchEvent struct {
	Resource string `json:"resource"`
	// Held: for state, whether the lock is held; true for acquired.
	Held bool `json:"held"`
	// FencingToken is the token of the holder that came (state, acquired)
	// or went (released, expired, force-released); 0 in the state of a
	// free lock.
	FencingToken int64      `json:"fencing_token"`
	Owner        string     `json:"owner,omitempty"`
	TTLms        int64      `json:"ttl_ms,omitempty"`
	ExpiresAt    *time.Time `json:"expires_at,omitempty"`
}
