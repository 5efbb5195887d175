package vending

import (
	"bytes"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/leaf-nats/leaf/ids"
)

func TestParseCount(t *testing.T) {
	const max = 10000
	for _, tc := range []struct {
		body string
		want int // 0: a 400
	}{
		{"", 1},
		{" \n\t", 1},
		{"1", 1},
		{"5", 5},
		{" 42\n", 42},
		{"\r\n7\r\n", 7},
		{"10000", 10000},
		{"0010", 10},
		{"0", 0},
		{"-1", 0},
		{"+1", 0},
		{"10001", 0},
		{"1000000000000", 0},
		{"99999999999999999999999999999999", 0},
		{"1e3", 0},
		{"1.0", 0},
		{"abc", 0},
		{"1 2", 0},
		{"0x10", 0},
		{"5\x00", 0},
		{"\x005", 0},
		{"\xff\xfe", 0},
		{"٣", 0}, // Arabic-Indic digit three
		{"５", 0}, // full-width 5
		{strings.Repeat("1", 1<<20), 0},
	} {
		t.Run(strconv.Quote(tc.body[:min(len(tc.body), 20)]), func(t *testing.T) {
			n, err := ParseCount([]byte(tc.body), max)
			if tc.want == 0 {
				if !errors.Is(err, ErrBadCount) || n != 0 {
					t.Fatalf("ParseCount = %d, %v; want ErrBadCount", n, err)
				}
				if len(err.Error()) > 200 {
					t.Fatalf("error message of %d bytes echoes too much input", len(err.Error()))
				}
				return
			}
			if err != nil || n != tc.want {
				t.Fatalf("ParseCount = %d, %v; want %d", n, err, tc.want)
			}
		})
	}
}

func TestTextAndBinaryRoundTrip(t *testing.T) {
	for _, ids := range [][]int64{
		{1},
		{1, 2, 3},
		{1862213154793730049, 1862213154793730050},
		{1<<63 - 1},
	} {
		text := AppendText(nil, ids)
		if bytes.HasSuffix(text, []byte("\n")) {
			t.Fatalf("text %q has a trailing newline", text)
		}
		got, err := DecodeText(nil, text)
		if err != nil || !equal(got, ids) {
			t.Fatalf("text round trip %v -> %q -> %v, %v", ids, text, got, err)
		}
		bin := AppendBinary(nil, ids)
		got, err = DecodeBinary(nil, bin)
		if err != nil || !equal(got, ids) {
			t.Fatalf("binary round trip %v -> %v, %v", ids, got, err)
		}
	}
}

func TestDecodeRejectsBadReplies(t *testing.T) {
	for _, body := range []string{"", "\n", "1\n", "1\n\n2", "0", "-5", "12a", "9999999999999999999", "99999999999999999999"} {
		if ids, err := DecodeText(nil, []byte(body)); err == nil {
			t.Errorf("DecodeText(%q) = %v, want an error", body, ids)
		}
	}
	for _, body := range [][]byte{nil, {1, 2, 3}, make([]byte, 8), {0x80, 0, 0, 0, 0, 0, 0, 1}} {
		if ids, err := DecodeBinary(nil, body); err == nil {
			t.Errorf("DecodeBinary(%v) = %v, want an error", body, ids)
		}
	}
}

func FuzzParseCount(f *testing.F) {
	for _, s := range []string{"", "1", " 10000 ", "0", "-1", "1e3", "abc", "5\x00", "\xff"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		n, err := ParseCount(body, 10000)
		if err != nil {
			if n != 0 || !errors.Is(err, ErrBadCount) {
				t.Fatalf("ParseCount(%q) = %d, %v", body, n, err)
			}
			return
		}
		if n < 1 || n > 10000 {
			t.Fatalf("ParseCount(%q) = %d, out of range", body, n)
		}
		// Whatever it accepts is a decimal in white space.
		if trimmed := strings.TrimSpace(string(body)); trimmed != "" {
			v, err := strconv.Atoi(trimmed)
			if err != nil || v != n || strings.ContainsAny(trimmed, "+-") {
				t.Fatalf("ParseCount(%q) = %d, but the body is not that decimal", body, n)
			}
		}
	})
}

func FuzzDecodeText(f *testing.F) {
	f.Add([]byte("1\n2\n3"))
	f.Add([]byte("9223372036854775807"))
	f.Add([]byte("5\n6\n8\n3"))
	f.Fuzz(func(t *testing.T, body []byte) {
		ids, err := DecodeText(nil, body)
		// The client's reading of text as runs accepts the same replies
		// and holds the same IDs.
		rs, rerr := decodeTextRanges(nil, body)
		if (err == nil) != (rerr == nil) {
			t.Fatalf("%q: DecodeText says %v, decodeTextRanges %v", body, err, rerr)
		}
		var flat []int64
		for _, r := range rs {
			for i := range r.Count {
				flat = append(flat, r.First+i)
			}
		}
		if !equal(flat, ids) {
			t.Fatalf("%q: DecodeText = %v, decodeTextRanges = %v", body, ids, rs)
		}
		if err != nil {
			return
		}
		for _, id := range ids {
			if id <= 0 {
				t.Fatalf("DecodeText(%q) returned %d", body, id)
			}
		}
		if !bytes.Equal(AppendText(nil, ids), body) {
			// Leading zeros are the only other spelling it accepts.
			for _, field := range bytes.Split(body, []byte("\n")) {
				if field[0] != '0' {
					continue
				}
				return
			}
			t.Fatalf("DecodeText(%q) = %v does not re-encode to the input", body, ids)
		}
	})
}

// The range encodings hand out the IDs the ID encodings do, in a few bytes.
func TestRangeEncodings(t *testing.T) {
	rs := []ids.Range{{First: 1, Count: 3}, {First: 10, Count: 1}, {First: 1<<62 - 1, Count: 2}}
	want := []int64{1, 2, 3, 10, 1<<62 - 1, 1 << 62}
	if got := AppendTextRanges(nil, rs); !bytes.Equal(got, AppendText(nil, want)) {
		t.Fatalf("AppendTextRanges = %q, want %q", got, AppendText(nil, want))
	}
	if got := AppendBinaryRanges(nil, rs); !bytes.Equal(got, AppendBinary(nil, want)) {
		t.Fatalf("AppendBinaryRanges differs from AppendBinary")
	}
	body := AppendRanges(nil, rs)
	if len(body) != 16*len(rs) {
		t.Fatalf("ranges reply of %d bytes for %d runs", len(body), len(rs))
	}
	got, err := DecodeRanges(nil, body)
	if err != nil || len(got) != len(rs) || ids.Count(got) != int64(len(want)) {
		t.Fatalf("DecodeRanges = %v, %v; want %v", got, err, rs)
	}
	for i := range rs {
		if got[i] != rs[i] {
			t.Fatalf("run %d = %v, want %v", i, got[i], rs[i])
		}
	}
	if r := (ids.Range{First: 5, Count: 3}); r.Last() != 7 {
		t.Fatalf("Last = %d", r.Last())
	}
}

func TestDecodeRangesRejectsBadReplies(t *testing.T) {
	enc := func(pairs ...int64) []byte {
		var rs []ids.Range
		for i := 0; i+1 < len(pairs); i += 2 {
			rs = append(rs, ids.Range{First: pairs[i], Count: pairs[i+1]})
		}
		return AppendRanges(nil, rs)
	}
	for name, body := range map[string][]byte{
		"empty":            nil,
		"not 16 bytes":     make([]byte, 17),
		"zero ID":          enc(0, 5),
		"negative ID":      enc(-3, 5),
		"empty run":        enc(5, 0),
		"negative count":   enc(5, -1),
		"past the largest": enc(1<<63-2, 5),
		"overlapping":      enc(1, 10, 5, 10),
		"descending":       enc(100, 1, 50, 1),
		"repeated":         enc(7, 1, 7, 1),
	} {
		if rs, err := DecodeRanges(nil, body); err == nil || !errors.Is(err, ErrBadReply) {
			t.Errorf("%s: DecodeRanges = %v, %v; want ErrBadReply", name, rs, err)
		}
	}
}

func FuzzDecodeRanges(f *testing.F) {
	f.Add(AppendRanges(nil, []ids.Range{{First: 1, Count: 3}, {First: 10, Count: 1}}))
	f.Add(AppendRanges(nil, []ids.Range{{First: 1<<63 - 1, Count: 1}}))
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, body []byte) {
		rs, err := DecodeRanges(nil, body)
		if err != nil {
			if len(rs) != 0 {
				t.Fatalf("DecodeRanges(%x) failed and returned %v", body, rs)
			}
			return
		}
		// Whatever it accepts is positive, non-empty, ascending without
		// overlap, and re-encodes to the input.
		prev := int64(0)
		for _, r := range rs {
			if r.First <= prev || r.Count < 1 || r.Last() < r.First {
				t.Fatalf("DecodeRanges(%x) accepted %v", body, rs)
			}
			prev = r.Last()
		}
		if !bytes.Equal(AppendRanges(nil, rs), body) {
			t.Fatalf("DecodeRanges(%x) = %v does not re-encode to the input", body, rs)
		}
	})
}

func equal(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
