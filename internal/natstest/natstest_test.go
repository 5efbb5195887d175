package natstest

import (
	"net"
	"strconv"
	"testing"
)

// FreePort's ports are free, differ from one call to the next, and lie
// below the ephemeral range, where a listener on port 0 never lands.
func TestFreePortBelowTheEphemeralRange(t *testing.T) {
	seen := map[int]bool{}
	for range 50 {
		p := FreePort(t)
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
		if portsHi-portsLo >= minPorts && (p < portsLo || p >= portsHi) {
			t.Fatalf("port %d outside %d-%d", p, portsLo, portsHi-1)
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Fatalf("port %d: %v", p, err)
		}
		l.Close()
	}
	t.Logf("ports %d-%d below the ephemeral range", portsLo, portsHi-1)
}
