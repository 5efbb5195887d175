package main

import (
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
)

// The connection's error handler leaves to the askers the refusals of the
// questions they ask, and logs every other refusal.
func TestRefusalsReportedElsewhere(t *testing.T) {
	refused := func(op, subject string) error {
		return fmt.Errorf("%w: Permissions Violation for %s %q", nats.ErrPermissionViolation, op, subject)
	}
	cases := []struct {
		err  error
		want bool
	}{
		{refused("Publish to", "$SRV.STATS.leaf"), true},
		{refused("Publish to", "ids.peers"), true},
		{refused("Publish to", "ids.peers.mark"), true},
		{refused("Publish to", "$SYS.REQ.SERVER.PING.VARZ"), true},
		{refused("Publish to", "_INBOX.leaf-handoff-probe"), true},
		{refused("Publish to", "leaf.peers"), false}, // another prefix's
		{refused("Subscription to", "ids.peers"), false},
		{refused("Publish to", "$JS.API.INFO"), false},
		{refused("Publish to", "_INBOX.abc"), false},
		{fmt.Errorf("nats: %s", `Permissions Violation for Publish to "ids.peers"`), false},
	}
	for _, c := range cases {
		if got := reportedElsewhere(c.err, "ids"); got != c.want {
			t.Errorf("%v: reported elsewhere %v, want %v", c.err, got, c.want)
		}
	}
}
