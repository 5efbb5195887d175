package natsserver_test

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/leaf-nats/leaf/internal/natsserver"
	"github.com/leaf-nats/leaf/internal/natstest"
)

// Syncs tells a server that syncs every write from one that syncs lazily, to
// a user of the system account and of an account that imports the question
// (as docs/nats-accounts.conf's LEAF does); others see nothing.
func TestSyncs(t *testing.T) {
	for _, tc := range []struct {
		name   string
		always bool
	}{{"embedded", true}, {"default", false}} {
		t.Run(tc.name, func(t *testing.T) {
			s := natstest.ServerWith(t, natsserver.Config{Name: "n1", Configure: func(o *server.Options) {
				if !tc.always {
					o.SyncAlways = false
					o.SyncInterval = 2 * time.Minute
				}
				app, sys, leaf := server.NewAccount("APP"), server.NewAccount("SYS"), server.NewAccount("LEAF")
				if err := sys.AddServiceExportWithResponse(natsserver.VarzSubject, server.Streamed, []*server.Account{leaf}); err != nil {
					t.Fatal(err)
				}
				if err := leaf.AddServiceImport(sys, natsserver.VarzSubject, ""); err != nil {
					t.Fatal(err)
				}
				o.Accounts = []*server.Account{app, sys, leaf}
				o.SystemAccount = "SYS"
				o.Users = []*server.User{
					{Username: "app", Password: "a", Account: app},
					{Username: "sys", Password: "s", Account: sys},
					{Username: "leaf", Password: "l", Account: leaf},
				}
			}})
			app := natstest.Conn(t, s, nats.UserInfo("app", "a"))
			if got, err := natsserver.Syncs(app, 2*time.Second); !errors.Is(err, natsserver.ErrNotVisible) {
				t.Fatalf("an application account's user: Syncs = %+v, %v; want ErrNotVisible", got, err)
			}
			for _, user := range []string{"sys", "leaf"} {
				nc := natstest.Conn(t, s, nats.UserInfo(user, user[:1]))
				got, err := natsserver.Syncs(nc, time.Second)
				if err != nil {
					t.Fatalf("%s: %v", user, err)
				}
				if len(got) != 1 || got[0].Server != "n1" || !got[0].JetStream || got[0].Always != tc.always {
					t.Fatalf("%s: Syncs = %+v; want server n1 with JetStream, always %v", user, got, tc.always)
				}
				if !tc.always && got[0].Interval != 2*time.Minute {
					t.Fatalf("%s: interval %v; want 2m", user, got[0].Interval)
				}
			}
		})
	}
}
