package segment

import (
	"errors"
	"strings"
	"testing"
)

// FuzzValidateTag checks that every tag ValidateTag accepts is safe as one
// or more NATS subject tokens and as a KV key (1 to MaxTagLen of
// [A-Za-z0-9_-], dots only between non-empty tokens), and that every
// refusal wraps ErrInvalidTag. Seeds: testdata/fuzz/FuzzValidateTag.
func FuzzValidateTag(f *testing.F) {
	for _, s := range []string{"order", "order.eu", "a-b_c", "", ".", "a..b", "*", ">", "a b", "订单", strings.Repeat("x", MaxTagLen+1)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, tag string) {
		err := ValidateTag(tag)
		if err != nil {
			if !errors.Is(err, ErrInvalidTag) {
				t.Fatalf("ValidateTag(%q) = %v, does not wrap ErrInvalidTag", tag, err)
			}
			if err.Error() == "" {
				t.Fatalf("ValidateTag(%q): empty message", tag)
			}
			return
		}
		if len(tag) == 0 || len(tag) > MaxTagLen {
			t.Fatalf("ValidateTag accepted %q of %d bytes", tag, len(tag))
		}
		for _, token := range strings.Split(tag, ".") {
			if token == "" {
				t.Fatalf("ValidateTag accepted %q with an empty token", tag)
			}
			for _, c := range []byte(token) {
				ok := c == '_' || c == '-' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
				if !ok {
					t.Fatalf("ValidateTag accepted %q with byte %q", tag, c)
				}
			}
		}
	})
}
