// Command firstid measures how long a vendor takes from exec to its first
// snowflake ID: it starts the vendor binary given, with the environment it
// runs in, asks leaf.snowflake every few milliseconds until a reply carries
// an ID, prints the time, and stops the vendor with SIGTERM.
//
//	firstid -vendor ./vendor -url nats://127.0.0.1:4222 [-n 3]
//
// With -n above 1 it starts the vendor that many times in a row (the first
// on whatever store it finds, the others on the store the first left) and
// prints each time.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
)

func main() {
	bin := flag.String("vendor", "vendor", "vendor binary")
	url := flag.String("url", "nats://127.0.0.1:4222", "NATS URL the vendor serves on")
	n := flag.Int("n", 1, "starts in a row")
	timeout := flag.Duration("timeout", time.Minute, "give up on a start after this long")
	flag.Parse()
	for i := range *n {
		d, err := firstID(*bin, *url, *timeout)
		if err != nil {
			fmt.Fprintln(os.Stderr, "firstid:", err)
			os.Exit(1)
		}
		fmt.Printf("start %d: first ID after %v\n", i+1, d.Round(time.Millisecond))
	}
}

func firstID(bin, url string, timeout time.Duration) (time.Duration, error) {
	cmd := exec.Command(bin)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	}()
	var nc *nats.Conn
	for nc == nil {
		if time.Since(start) > timeout {
			return 0, errors.New("no NATS server at " + url)
		}
		nc, _ = nats.Connect(url, nats.Timeout(50*time.Millisecond))
		if nc == nil {
			time.Sleep(2 * time.Millisecond)
		}
	}
	defer nc.Close()
	for time.Since(start) < timeout {
		m, err := nc.Request("leaf.snowflake", nil, 100*time.Millisecond)
		if err == nil && m.Header.Get("Nats-Service-Error-Code") == "" && len(m.Data) > 0 {
			return time.Since(start), nil
		}
		time.Sleep(2 * time.Millisecond)
	}
	return 0, fmt.Errorf("no ID within %v", timeout)
}
