package vending_test

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/leaf-nats/leaf/internal/natsserver"
	"github.com/leaf-nats/leaf/vending"
)

// exampleVendor starts an embedded nats-server and a vending service that
// serves tag "order" from a counter, and returns a connection to it and a
// function that stops them all.
func exampleVendor() (*nats.Conn, func()) {
	dir, err := os.MkdirTemp("", "leaf-example")
	if err != nil {
		panic(err)
	}
	s, err := natsserver.Start(natsserver.Config{Listen: "127.0.0.1:0", StoreDir: dir})
	if err != nil {
		panic(err)
	}
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		panic(err)
	}
	svc, err := vending.Open(nc, vending.Config{Segments: newCounterSegments("order")})
	if err != nil {
		panic(err)
	}
	return nc, func() {
		svc.Close(context.Background())
		nc.Close()
		stopServer(s)
		os.RemoveAll(dir)
	}
}

func stopServer(s *server.Server) {
	s.Shutdown()
	s.WaitForShutdown()
}

func ExampleClient_Segment() {
	nc, stop := exampleVendor()
	defer stop()

	c, err := vending.NewClient(nc, vending.ClientConfig{})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	ctx := context.Background()

	orders, err := c.Segment("order")
	if err != nil {
		panic(err)
	}
	ids, err := orders.NextN(ctx, 3)
	fmt.Println(ids, err)
	id, err := orders.Next(ctx)
	fmt.Println(id, err)
	// Output:
	// [1 2 3] <nil>
	// 4 <nil>
}

func ExampleError() {
	nc, stop := exampleVendor()
	defer stop()
	c, _ := vending.NewClient(nc, vending.ClientConfig{})
	defer c.Close()

	invoices, _ := c.Segment("invoice") // not a tag of this vendor
	_, err := invoices.Next(context.Background())
	var verr *vending.Error
	if errors.As(err, &verr) {
		fmt.Println(verr.Code, errors.Is(err, vending.ErrNotFound))
	}
	_, err = invoices.NextN(context.Background(), 0) // refused locally
	fmt.Println(errors.Is(err, vending.ErrBadRequest))
	// Output:
	// 404 true
	// true
}

func ExampleClientConfig_prefetch() {
	nc, stop := exampleVendor()
	defer stop()

	// Keep up to 1000 IDs of each source in memory; refill at 200.
	c, err := vending.NewClient(nc, vending.ClientConfig{Prefetch: 1000, LowWater: 200})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	orders, _ := c.Segment("order")
	var last int64
	for range 5000 {
		if last, err = orders.Next(context.Background()); err != nil {
			panic(err)
		}
	}
	fmt.Println(last)
	// Output: 5000
}
