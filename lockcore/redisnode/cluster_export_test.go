package redisnode

// Resent is how many lock scripts the node sent again because the Cluster
// answered that they did not run (MOVED, ASK, TRYAGAIN, ...).
func (c *ClusterNode) Resent() int64 { return c.resent.Load() }
