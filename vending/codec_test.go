package vending

import (
	"bytes"
	"errors"
	"strconv"
	"strings"
	"testing"
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
	f.Fuzz(func(t *testing.T, body []byte) {
		ids, err := DecodeText(nil, body)
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
