package segment_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/leaf-nats/leaf/segment"
)

func ExampleAllocator_Take() {
	ctx := context.Background()
	// A store with tag "order": step 1000, max_id 1 (a fresh row).
	store := newFakeStore(1000, "order")
	a, err := segment.Open(ctx, segment.Options{Store: store})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer a.Close(context.Background())

	ids, err := a.Take(ctx, "order", nil, 3)
	fmt.Println(ids, err)

	_, err = a.Take(ctx, "invoice", nil, 1)
	fmt.Println(errors.Is(err, segment.ErrUnknownTag), err)
	// Output:
	// [1 2 3] <nil>
	// true segment: tag "invoice" not found (add it with: vendor tags add invoice)
}
