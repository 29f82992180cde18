package redisnode

// Resent is how many lock scripts the node sent again because the Cluster
// answered that they did not run (MOVED, ASK, TRYAGAIN, ...).
func (c *ClusterNode) Resent() int64 { return c.resent.Load() }

// SetAfterProbe makes Check run f between its probe of the primaries and
// its record of the result.
func (c *ClusterNode) SetAfterProbe(f func()) { c.afterProbe = f }

// ErrMigrating is what a listing step fails with when a slot of the
// Cluster was migrating around it.
var ErrMigrating = errMigrating

// SetBeforeScan makes ScanLocks run f before its SCAN, with the index of
// the primary it scans.
func (c *ClusterNode) SetBeforeScan(f func(shard int)) { c.beforeScan = f }

// UseBroadcast makes the node publish with PUBLISH and hear announcements
// over one pub/sub connection, as on a Cluster older than Redis 7. It must
// be called before the node's first script or watch.
func (c *ClusterNode) UseBroadcast() { c.pubMode.Store(pubBroadcast) }
