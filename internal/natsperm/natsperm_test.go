package natsperm

import (
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/leaf-nats/leaf/internal/natsserver"
	"github.com/leaf-nats/leaf/internal/natstest"
)

// violation is the error nats.go makes of a server's -ERR line.
func violation(text string) error { return fmt.Errorf("%w: %s", nats.ErrPermissionViolation, text) }

func TestParse(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want Refusal
		ok   bool
	}{
		{"publish", violation(`Permissions Violation for Publish to "leaf.peers"`), Refusal{Op: Publish, Subject: "leaf.peers"}, true},
		{"subscribe", violation(`Permissions Violation for Subscription to "leaf.>"`), Refusal{Op: Subscribe, Subject: "leaf.>"}, true},
		{"queue", violation(`Permissions Violation for Subscription to "leaf.strict.a" using queue "leaf"`),
			Refusal{Op: Subscribe, Subject: "leaf.strict.a", Queue: "leaf"}, true},
		{"sid", violation(`Permissions Violation for Subscription to "x.y" (sid "4")`), Refusal{Op: Subscribe, Subject: "x.y"}, true},
		{"reply", violation(`Permissions Violation for Publish with Reply of "_INBOX.a"`), Refusal{Op: Reply, Subject: "_INBOX.a"}, true},
		{"wrapped", fmt.Errorf("ask: %w", violation(`Permissions Violation for Publish to "$SRV.STATS.leaf"`)),
			Refusal{Op: Publish, Subject: "$SRV.STATS.leaf"}, true},
		{"another error naming a subject", errors.New(`nats: Permissions Violation for Publish to "leaf.peers"`), Refusal{}, false},
		{"no subject", violation("Permissions Violation for Publish"), Refusal{}, false},
		{"unterminated", violation(`Permissions Violation for Publish to "leaf.pe`), Refusal{}, false},
		{"nil", nil, Refusal{}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, ok := Parse(c.err)
			got.Err = nil
			if ok != c.ok || got != c.want {
				t.Fatalf("Parse: %+v, %v; want %+v, %v", got, ok, c.want, c.ok)
			}
		})
	}
}

// The text Parse reads is the one a real server sends, as nats.go passes
// it on; Since tells a refusal that came after the mark from one before.
func TestSinceOnARealServer(t *testing.T) {
	s := natstest.ServerWith(t, natsserver.Config{Configure: func(o *server.Options) {
		o.Users = []*server.User{{Username: "u", Password: "pw", Permissions: &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: []string{"allowed.>"}},
			Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX.>"}},
		}}}
	}})
	handled := make(chan error, 4)
	nc := natstest.Conn(t, s, nats.UserInfo("u", "pw"), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { handled <- err }))

	mark := Now(nc)
	nc.Publish("allowed.x", nil)
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if r, ok := mark.Refused(); ok {
		t.Fatalf("an allowed publish: refused %+v", r)
	}
	nc.Publish("refused.x", nil)
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	r, ok := mark.Refused()
	if !ok || !r.Publishes("refused.x") {
		t.Fatalf("a refused publish: %+v, %v; want a refused publish on refused.x", r, ok)
	}
	if r, ok := Now(nc).Refused(); ok {
		t.Fatalf("a mark after the refusal: refused %+v", r)
	}
	if r, ok := mark.Advance(); !ok || !r.Publishes("refused.x") {
		t.Fatalf("Advance: %+v, %v; want the refusal since the mark", r, ok)
	}
	if r, ok := mark.Advance(); ok {
		t.Fatalf("Advance again: %+v; want nothing new", r)
	}
	if got, ok := Parse(<-handled); !ok || got.Subject != "refused.x" {
		t.Fatalf("the error handler's error: %+v, %v", got, ok)
	}

	nc.Subscribe("other.x", func(*nats.Msg) {})
	nc.Flush()
	if got, ok := Parse(<-handled); !ok || got.Op != Subscribe || got.Subject != "other.x" {
		t.Fatalf("a refused subscription: %+v, %v", got, ok)
	}
}
