package vending_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leaf-nats/leaf/internal/natstest"
	"github.com/leaf-nats/leaf/snowflake"
	"github.com/leaf-nats/leaf/vending"
)

// BenchmarkRequest is one single-ID request over a real server: the service
// next to a bare responder answering a fixed 19-digit number, so the
// difference in time and allocations is the service's own; "ranges" asks
// for the ranges encoding, as the Go client does.
func BenchmarkRequest(b *testing.B) {
	s := natstest.Server(b)
	for _, tc := range []struct {
		name, subject string
		start         func(nc *nats.Conn)
	}{
		{"bare", "bare.snowflake", func(nc *nats.Conn) {
			reply := []byte("1862213154793730049")
			if _, err := nc.QueueSubscribe("bare.snowflake", "bare", func(m *nats.Msg) { m.Respond(reply) }); err != nil {
				b.Fatal(err)
			}
			nc.Flush()
		}},
		{"vendor", "leaf.snowflake", func(nc *nats.Conn) {
			g, err := snowflake.New(snowflake.Settings{})
			if err != nil {
				b.Fatal(err)
			}
			svc, err := vending.Open(nc, vending.Config{Snowflake: g})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { svc.Close(context.Background()) })
		}},
	} {
		tc.start(natstest.Conn(b, s))
		nc := natstest.Conn(b, s)
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := nc.Request(tc.subject, nil, 5*time.Second); err != nil {
					b.Fatal(err)
				}
			}
		})
		if tc.name == "vendor" {
			msg := nats.NewMsg(tc.subject)
			msg.Header.Set(vending.EncodingHeader, vending.EncodingRanges)
			b.Run("vendor-ranges", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := nc.RequestMsg(msg, 5*time.Second); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
