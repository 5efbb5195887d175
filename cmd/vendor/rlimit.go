package main

import "log/slog"

// httpMaxConns bounds the HTTP server's connections: LEAF_HTTP_MAX_CONNS,
// and at most a quarter of the open-files limit, which the vendor raises
// to its hard limit first.
func httpMaxConns(configured int, log *slog.Logger) int {
	limit, err := raiseFileLimit()
	if err != nil {
		log.Warn("could not raise the open-files limit", "limit", limit, "err", err)
	}
	if limit > 0 && configured > int(limit/4) {
		log.Warn("LEAF_HTTP_MAX_CONNS is more than a quarter of the open-files limit: capped there, so that HTTP clients cannot "+
			"use up the descriptors NATS needs (raise the limit: ulimit -n, LimitNOFILE, --ulimit nofile)",
			"configured", configured, "open_files_limit", limit, "max_conns", limit/4)
		return max(int(limit/4), 1)
	}
	return configured
}
