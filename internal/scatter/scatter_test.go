package scatter

import (
	"bytes"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/leaf-nats/leaf/internal/natsperm"
	"github.com/leaf-nats/leaf/internal/natsserver"
	"github.com/leaf-nats/leaf/internal/natstest"
	"github.com/leaf-nats/leaf/internal/testtool"
)

// Every vendor listening hears the question and its answer is gathered;
// the gathering ends once Enough says so and Grace has passed.
func TestAskGathersEveryAnswer(t *testing.T) {
	s := natstest.Server(t)
	for _, name := range []string{"a", "b", "c"} {
		nc := natstest.Conn(t, s)
		nc.Subscribe("q", func(m *nats.Msg) { m.Respond(append([]byte(name+":"), m.Data...)) })
		nc.Flush()
	}
	var got []string
	q := Question{Body: []byte("hi"), Wait: time.Minute, Enough: func() bool { return len(got) == 3 }}
	err := Ask(t.Context(), natstest.Conn(t, s), "q", q, func(a Answer) {
		if a.Arrived.Before(a.Sent) {
			t.Errorf("an answer arrived at %v, before its question was sent at %v", a.Arrived, a.Sent)
		}
		got = append(got, string(a.Data))
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if strings.Join(got, " ") != "a:hi b:hi c:hi" {
		t.Fatalf("answers %q, want one of each vendor to the body", got)
	}
}

// A question NATS refuses is told from a cluster of one. An Asker says so
// once, and asks no more until AskAgainAfter has passed on its clock.
func TestAskerHoldsOffWhileRefused(t *testing.T) {
	s := natstest.ServerWith(t, natsserver.Config{Configure: func(o *server.Options) {
		o.Users = []*server.User{{Username: "u", Password: "pw", Permissions: &server.Permissions{
			Publish:   &server.SubjectPermission{Deny: []string{"q"}},
			Subscribe: &server.SubjectPermission{Allow: []string{">"}},
		}}}
	}})
	nc := natstest.Conn(t, s, nats.UserInfo("u", "pw"), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	var logs syncBuffer
	a := NewAsker(AskerConfig{Conn: nc, Subject: "q", What: "questions", Lost: "what they say",
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	clock := testtool.NewClock(time.Unix(1000, 0))
	q := Question{Wait: time.Minute, Enough: func() bool { return true }, Clock: clock}
	ask := func() (asked bool) {
		t.Helper()
		since := natsperm.Now(nc)
		err := a.Ask(t.Context(), q, func(Answer) { t.Error("an answer to a refused question") })
		if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "publish on q") {
			t.Fatalf("Ask: %v; want the refusal, naming the subject", err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		_, asked = since.Refused()
		return asked
	}
	if !ask() {
		t.Fatal("the first question was not sent")
	}
	clock.Add(AskAgainAfter - time.Second)
	if ask() {
		t.Fatal("asked again while holding off")
	}
	clock.Add(time.Second)
	if !ask() {
		t.Fatal("did not ask again after AskAgainAfter")
	}
	if n := strings.Count(logs.String(), "NATS refuses this vendor's questions"); n != 1 {
		t.Fatalf("the refusal was logged %d times, want once:\n%s", n, logs.String())
	}
	if strings.Contains(strings.ToLower(logs.String()), "permissions violation") {
		t.Fatalf("the log carries nats.go's error text:\n%s", logs.String())
	}
}

// A question NATS lets through is no refusal, and a refusal of another
// subject meanwhile is not taken for one.
func TestAskNotRefused(t *testing.T) {
	s := natstest.ServerWith(t, natsserver.Config{Configure: func(o *server.Options) {
		o.Users = []*server.User{{Username: "u", Password: "pw", Permissions: &server.Permissions{
			Publish: &server.SubjectPermission{Deny: []string{"other"}},
		}}}
	}})
	nc := natstest.Conn(t, s, nats.UserInfo("u", "pw"), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	q := Question{Wait: time.Minute, Enough: func() bool {
		nc.Publish("other", nil) // refused while the question is out
		return true
	}}
	if err := Ask(t.Context(), nc, "q", q, func(Answer) {}); err != nil {
		t.Fatalf("Ask: %v; want no refusal", err)
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
