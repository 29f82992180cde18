package redisnode

import "testing"

// sendAction over every state of a dirty channel.
func TestSendAction(t *testing.T) {
	cases := []struct {
		want, subscribed, unsent bool
		act                      hubAction
	}{
		{want: true, subscribed: false, unsent: true, act: hubSubscribe},    // a first watch
		{want: true, subscribed: true, unsent: true, act: hubSubscribe},     // a new SUBSCRIBE after one failed
		{want: true, subscribed: true, unsent: false, act: hubNone},         // already sent
		{want: true, subscribed: false, unsent: false, act: hubNone},        // not reached: a wanted channel has a SUBSCRIBE
		{want: false, subscribed: true, unsent: false, act: hubUnsubscribe}, // the last watch left
		{want: false, subscribed: true, unsent: true, act: hubUnsubscribe},  // not reached: the last watch to leave drops the SUBSCRIBE
		{want: false, subscribed: false, unsent: true, act: hubNone},        // not reached, as above
		{want: false, subscribed: false, unsent: false, act: hubNone},       // nothing to undo
	}
	for _, c := range cases {
		if got := sendAction(c.want, c.subscribed, c.unsent); got != c.act {
			t.Errorf("sendAction(want %v, subscribed %v, unsent %v) = %d, want %d", c.want, c.subscribed, c.unsent, got, c.act)
		}
	}
}
