package redisnode_test

import (
	"fmt"

	"github.com/lockgate/lockgate/lockcore/redisnode"
)

// A Redis Cluster is one Redlock node, written as one URL: its seed nodes
// (any nodes of the Cluster) as host:port and addr parameters.
func ExampleParseClusterURL() {
	o, err := redisnode.ParseClusterURL("redis-cluster://user:secret@10.0.0.1:7000?addr=10.0.0.2:7000&addr=10.0.0.3:7000")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(o.Addrs, o.Username, o.TLSConfig == nil)
	_, err = redisnode.ParseClusterURL("redis-cluster://10.0.0.1:7000/0")
	fmt.Println(err)
	// Output:
	// [10.0.0.1:7000 10.0.0.2:7000 10.0.0.3:7000] user true
	// a Redis Cluster URL has no path (a Cluster has database 0 only), not "/0"
}
