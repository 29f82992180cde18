package redisnode

// NewDirect is New without the pipe: every lock script runs on its own
// pooled connection, as before pipelining. Only for benchmarks that compare.
func NewDirect(rawURL string) (*Node, error) { return newNode(rawURL, false) }

// PipeWorkers is how many pipelines a node may have in flight at once.
const PipeWorkers = pipeWorkers

// SetAfterProbe runs f in every Check of n between its probe and the
// record of its verdict.
func (n *Node) SetAfterProbe(f func()) { n.afterProbe = f }
