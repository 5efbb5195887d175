package segment_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/leaf-nats/leaf/segment"
)

func TestValidateTag(t *testing.T) {
	tests := []struct {
		tag string
		ok  bool
	}{
		{"order", true},
		{"Order_2024-eu.v1", true},
		{"a", true},
		{strings.Repeat("x", 128), true},
		{"", false},
		{strings.Repeat("x", 129), false},
		{"order.*", false},
		{"order.>", false},
		{"or der", false},
		{".order", false},
		{"order.", false},
		{"order..eu", false},
		{"ordér", false},
		{"order/eu", false},
	}
	for _, tt := range tests {
		t.Run(tt.tag, func(t *testing.T) {
			err := segment.ValidateTag(tt.tag)
			if tt.ok != (err == nil) {
				t.Fatalf("ValidateTag(%q) = %v, want ok %v", tt.tag, err, tt.ok)
			}
			if err != nil && !errors.Is(err, segment.ErrInvalidTag) {
				t.Fatalf("ValidateTag(%q) = %v, does not wrap ErrInvalidTag", tt.tag, err)
			}
		})
	}
}

// The message names the character a person typed, not one of its bytes.
func TestValidateTagNamesTheCharacter(t *testing.T) {
	for tag, want := range map[string]string{
		"订单":        `'订'`,
		"ordér":     `'é'`,
		"order\xff": "byte 0xff",
		"a b":       `' '`,
	} {
		if err := segment.ValidateTag(tag); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ValidateTag(%q) = %v, want it to name %s", tag, err, want)
		}
	}
}

func TestValidateRow(t *testing.T) {
	tests := []struct {
		name string
		row  segment.Row
		want error
	}{
		{"ok", segment.Row{Tag: "order", Step: 1000}, nil},
		{"bad tag", segment.Row{Tag: "a b", Step: 1000}, segment.ErrInvalidTag},
		{"zero step", segment.Row{Tag: "order"}, segment.ErrInvalidStep},
		{"step past int32", segment.Row{Tag: "order", Step: 1 << 31}, segment.ErrInvalidStep},
		{"negative start", segment.Row{Tag: "order", Step: 1, MaxID: -1}, errors.New("")},
		{"long description", segment.Row{Tag: "order", Step: 1, Description: strings.Repeat("d", 257)}, errors.New("")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := segment.ValidateRow(tt.row)
			if (err == nil) != (tt.want == nil) {
				t.Fatalf("ValidateRow = %v, want %v", err, tt.want)
			}
			if errors.Is(tt.want, segment.ErrInvalidTag) || errors.Is(tt.want, segment.ErrInvalidStep) {
				if !errors.Is(err, tt.want) {
					t.Fatalf("ValidateRow = %v, want it to wrap %v", err, tt.want)
				}
			}
		})
	}
}

func TestTagErrorMessages(t *testing.T) {
	tests := []struct {
		err  *segment.TagError
		want string
	}{
		{&segment.TagError{Tag: "order", Err: segment.ErrUnknownTag}, `segment: tag "order" not found (add it with: vendor tags add order)`},
		{&segment.TagError{Tag: "order", Err: segment.ErrTagExists}, `segment: tag "order" already exists (see it with: vendor tags list)`},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
		if !errors.Is(tt.err, tt.err.Err) {
			t.Errorf("%v does not wrap %v", tt.err, tt.err.Err)
		}
	}
}
