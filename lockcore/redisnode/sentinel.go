package redisnode

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/lockgate/lockgate/lockcore"
)

// ParseSentinelURL reads a node URL of the form
// redis-sentinel://[user:pass@]host:port/mastername?addr=host:port&addr=host:port
// (rediss-sentinel:// for TLS) into go-redis's failover options: the
// Sentinels at host:port and every addr, the primary named mastername, and
// user and password for the primary and the Sentinels alike. Only addr is
// accepted as a query parameter.
func ParseSentinelURL(rawURL string) (*redis.FailoverOptions, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	if u.Scheme != "redis-sentinel" && u.Scheme != "rediss-sentinel" {
		return nil, fmt.Errorf("scheme %q is not redis-sentinel or rediss-sentinel", u.Scheme)
	}
	master := strings.Trim(u.Path, "/")
	if master == "" || strings.Contains(master, "/") {
		return nil, fmt.Errorf("the path must be the primary's name as Sentinel knows it (/mymaster), not %q", u.Path)
	}
	o := &redis.FailoverOptions{MasterName: master}
	if o.SentinelAddrs, err = sentinelAddrs(u); err != nil {
		return nil, err
	}
	if u.User != nil {
		o.Username = u.User.Username()
		o.Password, _ = u.User.Password()
		o.SentinelUsername, o.SentinelPassword = o.Username, o.Password
	}
	if u.Scheme == "rediss-sentinel" {
		host, _, _ := net.SplitHostPort(u.Host)
		o.TLSConfig = &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12}
	}
	return o, nil
}

// sentinelAddrs returns the Sentinels' addresses of a redis-sentinel URL:
// its host:port, then every addr parameter's, each checked to be
// host:port. A parameter other than addr is an error.
func sentinelAddrs(u *url.URL) ([]string, error) {
	var addrs []string
	for _, a := range append([]string{u.Host}, u.Query()["addr"]...) {
		if _, _, err := net.SplitHostPort(a); err != nil || strings.HasPrefix(a, ":") {
			return nil, fmt.Errorf("sentinel address %q is not host:port", a)
		}
		addrs = append(addrs, a)
	}
	for k := range u.Query() {
		if k != "addr" {
			return nil, fmt.Errorf("unknown parameter %q (only addr=host:port is accepted)", k)
		}
	}
	return addrs, nil
}

// newSentinelNode is newNode for a Sentinel-managed primary, with the same
// client settings (see newNode for the reasons).
func newSentinelNode(rawURL string, pipelined bool) (*Node, error) {
	fo, err := ParseSentinelURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("redisnode: bad Redis Sentinel URL: %w", err)
	}
	n := &Node{name: "sentinel:" + fo.MasterName + "@" + fo.SentinelAddrs[0], protect: "1",
		sc: newLockScripts(lockcore.NewLeaseID())}
	fo.ContextTimeoutEnabled = true
	fo.MaxRetries = -1
	fo.DialerRetries = 1
	fo.DisableIdentity = true
	fo.OnConnect = n.onConnect
	n.rdb = redis.NewFailoverClient(fo)
	if pipelined {
		n.pipe = newPipe(n.rdb)
	}
	return n, nil
}
