package main

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ready")) })
	mux.HandleFunc("GET /down", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "not ready: no worker ID lease held", http.StatusServiceUnavailable)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())

	for _, tc := range []struct{ addr, path, wantErr string }{
		{"127.0.0.1:" + port, "/readyz", ""},
		{"0.0.0.0:" + port, "/readyz", ""}, // LEAF_HTTP_ADDR as in compose.yaml
		{":" + port, "/readyz", ""},
		{"127.0.0.1:" + port, "/down", "no worker ID lease"},
		{"nonsense", "/readyz", "LEAF_HTTP_ADDR"},
	} {
		t.Run(tc.addr+tc.path, func(t *testing.T) {
			err := check(tc.addr, tc.path)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("check(%q, %q) = %v, want error containing %q", tc.addr, tc.path, err, tc.wantErr)
			}
		})
	}
}

func TestHealthcheckCommand(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ready")) })
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "unhealthy", http.StatusServiceUnavailable)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	for _, tc := range []struct {
		addr string
		args []string
		code int
	}{
		{srv.Listener.Addr().String(), []string{"healthcheck"}, 0},
		{srv.Listener.Addr().String(), []string{"healthcheck", "/healthz"}, 1},
		{"", []string{"healthcheck"}, 0}, // no HTTP: nothing to ask
		{srv.Listener.Addr().String(), []string{"healthcheck", "/a", "/b"}, 2},
	} {
		t.Setenv("LEAF_HTTP_ADDR", tc.addr)
		var out strings.Builder
		if code := run(t.Context(), tc.args, &out, &out); code != tc.code {
			t.Errorf("LEAF_HTTP_ADDR=%q vendor %v: exit %d, want %d:\n%s", tc.addr, tc.args, code, tc.code, out.String())
		}
	}
}
