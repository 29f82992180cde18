package handlers

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"slices"
	"strings"
)

// listPosition is where a listing stands: listing Part (the prefix asked
// for, or one of the caller's grants under it) from lockcore's cursor Inner
// ("" to start Part).
type listPosition struct {
	Part  string `json:"p"`
	Inner string `json:"c,omitempty"`
}

// cursorSeal makes a listing's next_cursor opaque: the position sealed with
// AES-256-GCM under a key drawn at random when the handler is built, bound
// (as additional data) to the caller and to the prefix asked for. A cursor
// shows nothing of what it holds, a changed one does not open, and one
// issued to another caller or for another prefix does not open either. A
// cursor opens only in the process that issued it.
type cursorSeal struct{ aead cipher.AEAD }

func newCursorSeal() *cursorSeal {
	key := make([]byte, 32)
	_, _ = rand.Read(key) // never fails (crypto/rand)
	block, err := aes.NewCipher(key)
	if err != nil {
		panic(err) // a 32-byte key is always valid
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		panic(err)
	}
	return &cursorSeal{aead: aead}
}

func cursorAAD(caller, prefix string) []byte {
	return []byte("lockgate list cursor\x00" + caller + "\x00" + prefix)
}

// seal returns pos as a cursor for caller's listing of prefix.
func (c *cursorSeal) seal(caller, prefix string, pos listPosition) string {
	plain, _ := json.Marshal(pos)
	nonce := make([]byte, c.aead.NonceSize(), c.aead.NonceSize()+len(plain)+c.aead.Overhead())
	_, _ = rand.Read(nonce)
	return base64.RawURLEncoding.EncodeToString(c.aead.Seal(nonce, nonce, plain, cursorAAD(caller, prefix)))
}

// open returns the position of a cursor sealed for caller's listing of
// prefix, or false.
func (c *cursorSeal) open(caller, prefix, cursor string) (listPosition, bool) {
	b, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil || len(b) < c.aead.NonceSize()+c.aead.Overhead() {
		return listPosition{}, false
	}
	ns := c.aead.NonceSize()
	plain, err := c.aead.Open(nil, b[:ns], b[ns:], cursorAAD(caller, prefix))
	if err != nil {
		return listPosition{}, false
	}
	var pos listPosition
	if err := json.Unmarshal(plain, &pos); err != nil {
		return listPosition{}, false
	}
	return pos, true
}

// listParts returns what a listing of prefix covers for a caller granted
// grants (all: every resource): prefix itself when a grant covers it;
// otherwise the grants under prefix, sorted, each left out that another
// one covers (their names would be listed twice); none when no grant
// meets prefix. Two parts never share a name, and the parts depend only on
// prefix and the grants, never on which locks are held.
func listParts(prefix string, grants []string, all bool) []string {
	if all {
		return []string{prefix}
	}
	var parts []string
	for _, g := range grants {
		if strings.HasPrefix(prefix, g) {
			return []string{prefix}
		}
		if strings.HasPrefix(g, prefix) {
			parts = append(parts, g)
		}
	}
	slices.Sort(parts)
	kept := parts[:0]
	for _, p := range parts {
		// Sorted, a prefix comes right before the names it covers.
		if len(kept) == 0 || !strings.HasPrefix(p, kept[len(kept)-1]) {
			kept = append(kept, p)
		}
	}
	return kept
}
