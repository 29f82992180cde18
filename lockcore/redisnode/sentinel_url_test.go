package redisnode_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/lockgate/lockgate/lockcore/redisnode"
)

func TestParseSentinelURL(t *testing.T) {
	good := []struct {
		url, master, user, pass string
		addrs                   []string
		tls                     bool
	}{
		{"redis-sentinel://h1:26379/mymaster", "mymaster", "", "", []string{"h1:26379"}, false},
		{"redis-sentinel://u:p@h1:26379/m?addr=h2:26380&addr=h3:26381", "m", "u", "p", []string{"h1:26379", "h2:26380", "h3:26381"}, false},
		{"rediss-sentinel://h1:26379/m/", "m", "", "", []string{"h1:26379"}, true},
	}
	for _, c := range good {
		o, err := redisnode.ParseSentinelURL(c.url)
		if err != nil {
			t.Errorf("%s: %v", c.url, err)
			continue
		}
		if o.MasterName != c.master || !slices.Equal(o.SentinelAddrs, c.addrs) || o.Username != c.user ||
			o.Password != c.pass || o.SentinelUsername != c.user || o.SentinelPassword != c.pass || (o.TLSConfig != nil) != c.tls {
			t.Errorf("%s: got master %q addrs %v user %q pass %q tls %v", c.url, o.MasterName, o.SentinelAddrs, o.Username, o.Password, o.TLSConfig != nil)
		}
		if c.tls && o.TLSConfig.ServerName != "h1" {
			t.Errorf("%s: TLS server name %q, want h1", c.url, o.TLSConfig.ServerName)
		}
	}
	bad := []struct{ url, why string }{
		{"redis://h1:6379/0", "scheme"},
		{"redis-sentinel://h1:26379/", "primary's name"},
		{"redis-sentinel://h1:26379/a/b", "primary's name"},
		{"redis-sentinel://h1/m", "not host:port"},
		{"redis-sentinel://h1:26379/m?addr=:26380", "not host:port"},
		{"redis-sentinel://h1:26379/m?addr=h2", "not host:port"},
		{"redis-sentinel://h1:26379/m?db=1", "unknown parameter"},
		{"redis-sentinel://h1:26379/m?addr=h2:1&db=1", "unknown parameter"},
	}
	for _, c := range bad {
		if _, err := redisnode.ParseSentinelURL(c.url); err == nil || !strings.Contains(err.Error(), c.why) {
			t.Errorf("%s: error %v, want one saying %q", c.url, err, c.why)
		}
	}
}
