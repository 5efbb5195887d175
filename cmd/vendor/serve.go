package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leaf-nats/leaf/internal/natsserver"
	"github.com/leaf-nats/leaf/kv"
	"github.com/leaf-nats/leaf/snowflake"
	"github.com/leaf-nats/leaf/vending"
)

// serve runs a vendor until ctx ends, then shuts down in order: drain the
// service (requests received are answered), release the worker ID, close
// the stores and connections, stop the embedded server.
func serve(ctx context.Context, cfg Config, log *slog.Logger) error {
	natsURL := cfg.NATSURL
	if natsURL == "" {
		lock, err := natsserver.LockStore(cfg.NATSStoreDir)
		if errors.Is(err, natsserver.ErrStoreInUse) {
			return fmt.Errorf("%w: join it with LEAF_NATS_URL, or give this vendor its own LEAF_NATS_STORE_DIR", err)
		}
		if err != nil {
			return err
		}
		defer lock.Close()
		srv, err := natsserver.Start(natsserver.Config{Listen: cfg.NATSListen, StoreDir: cfg.NATSStoreDir, Name: "leaf-embedded"})
		if errors.Is(err, natsserver.ErrAddrInUse) {
			return fmt.Errorf("embedded NATS on %s: %w (another nats-server or vendor?): set LEAF_NATS_LISTEN to a free address, or LEAF_NATS_URL to use the server there",
				cfg.NATSListen, err)
		}
		if err != nil {
			return err
		}
		if err := lock.SetURL(srv.ClientURL()); err != nil {
			return fmt.Errorf("store directory lock: %w", err)
		}
		defer func() {
			srv.Shutdown()
			srv.WaitForShutdown()
			log.Info("embedded NATS server stopped")
		}()
		natsURL = srv.ClientURL()
		log.Info("embedded NATS server started", "url", natsURL, "store_dir", cfg.NATSStoreDir)
	}

	// Two connections: the service's is drained on shutdown while the data
	// connection stays up to release the lease and finish store writes.
	dataConn, _, err := connect(natsURL, cfg, "leaf-vendor-data", log)
	if err != nil {
		return err
	}
	defer dataConn.Close()
	js, err := jetstream.New(dataConn)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	if err := retryStartup(ctx, log, "reach JetStream", func() error {
		_, err := js.AccountInfo(ctx)
		return err
	}); err != nil {
		return fmt.Errorf("NATS at %s has no JetStream for this account (run nats-server with -js): %w", redact(natsURL), err)
	}

	clock := &offsetClock{}
	clock.d.Store(int64(cfg.hooks.ClockOffset))
	var wg sync.WaitGroup
	defer wg.Wait()
	if cfg.hooks.ClockOffsetFile != "" {
		clockCtx, stopClock := context.WithCancel(ctx)
		defer stopClock()
		wg.Go(func() { clock.follow(clockCtx, cfg.hooks.ClockOffsetFile, log) })
	}
	w := &worker{cfg: cfg, js: js, clock: clock, log: log}
	if err := retryStartup(ctx, log, "claim a worker ID", func() error { return w.claim(ctx) }); err != nil {
		return err
	}
	workerCtx, stopWorker := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWorker()
	workerDone := make(chan error, 1)
	wg.Go(func() { workerDone <- w.keep(workerCtx) })

	var segs *segments
	if err := retryStartup(ctx, log, "open the segment store", func() (err error) {
		segs, err = openSegments(ctx, cfg, js, log)
		return err
	}); err != nil {
		return err
	}
	defer segs.Close()

	svcConn, svcClosed, err := connect(natsURL, cfg, "leaf-vendor", log)
	if err != nil {
		return err
	}
	defer svcConn.Close()
	state := newVendorState(w, segs, svcConn.IsConnected)
	reg := newRegistry(state)
	svc, err := vending.Start(svcConn, vending.Config{
		Prefix:     cfg.SubjectPrefix,
		QueueGroup: cfg.QueueGroup,
		MaxBatch:   cfg.MaxBatch,
		Snowflake:  &w.slot,
		Epoch:      cfg.Epoch,
		Segments:   segs.alloc,
		Stats:      func() any { return state.snapshot(false) },
		Observer:   newRequestMetrics(reg),
		Logger:     log,
	})
	if err != nil {
		return err
	}

	hs, err := startHTTP(cfg, state, reg, svcConn, log)
	if err != nil {
		svc.Stop()
		return err
	}
	defer hs.close()

	log.Info("vendor serving", "prefix", cfg.SubjectPrefix, "queue_group", cfg.QueueGroup,
		"worker_id", w.slot.Get().WorkerID(), "segments", segs.kind)

	var runErr error
	select {
	case <-ctx.Done():
		log.Info("signal received: draining")
	case runErr = <-workerDone:
		log.Error("worker ID keeper stopped: draining", "err", runErr)
	}
	if err := svc.Stop(); err != nil {
		log.Warn("stopping service endpoints", "err", err)
	}
	if err := svcConn.Drain(); err != nil {
		log.Warn("draining NATS connection", "err", err)
	}
	select {
	case <-svcClosed:
		log.Info("drained: in-flight requests answered")
	case <-time.After(10 * time.Second):
		log.Warn("drain did not finish within 10s")
	}
	stopWorker()
	return runErr
}

// startupBudget is how long start-up steps are retried: on a fresh cluster
// the replicated buckets have no leader for a few seconds.
const startupBudget = 30 * time.Second

// retryStartup runs f until it succeeds, fails for good, or startupBudget
// passes. Errors that waiting cannot fix are returned at once.
func retryStartup(ctx context.Context, log *slog.Logger, what string, f func() error) error {
	deadline := time.Now().Add(startupBudget)
	for backoff := 100 * time.Millisecond; ; backoff = min(2*backoff, 2*time.Second) {
		err := f()
		switch {
		case err == nil:
			return nil
		case errors.Is(err, kv.ErrNoFreeWorkerID), errors.Is(err, snowflake.ErrClockBehind),
			errors.Is(err, snowflake.ErrSettings), errors.Is(err, jetstream.ErrJetStreamNotEnabled),
			errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount),
			ctx.Err() != nil, time.Now().Add(backoff).After(deadline):
			return err
		}
		log.Warn("start-up step failed; retrying", "step", what, "err", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
	}
}

// connect dials NATS with the configured authentication. It fails at once
// (no retry loop) when the first connection is refused, so a wrong password
// ends the process with the server's reason instead of hanging.
func connect(natsURL string, cfg Config, name string, log *slog.Logger) (*nats.Conn, <-chan struct{}, error) {
	opts, err := cfg.natsOptions()
	if err != nil {
		return nil, nil, err
	}
	closed := make(chan struct{})
	opts = append(opts,
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(time.Second),
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			if err != nil {
				log.Warn("NATS disconnected; reconnecting", "conn", name, "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info("NATS reconnected", "conn", name, "url", redact(nc.ConnectedUrl()))
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subj := ""
			if sub != nil {
				subj = sub.Subject
			}
			log.Error("NATS error", "conn", name, "subject", subj, "err", err)
		}),
		nats.ClosedHandler(func(*nats.Conn) { close(closed) }),
	)
	nc, err := nats.Connect(natsURL, opts...)
	if err != nil {
		hint := ""
		switch {
		case errors.Is(err, nats.ErrAuthorization), errors.Is(err, nats.ErrAuthExpired),
			strings.Contains(strings.ToLower(err.Error()), "authorization"):
			hint = " (the server refused the credentials: check the URL's user:password, LEAF_NATS_CREDS, LEAF_NATS_NKEY, LEAF_NATS_USER/PASSWORD or LEAF_NATS_TOKEN)"
		case strings.Contains(err.Error(), "tls:") || strings.Contains(err.Error(), "x509"):
			hint = " (TLS failed: check that LEAF_NATS_TLS_CA trusts the server's certificate and that LEAF_NATS_TLS_CERT/KEY hold a client certificate the server trusts)"
		case errors.Is(err, nats.ErrNoServers):
			hint = " (is a NATS server running there? leave LEAF_NATS_URL empty for an embedded one)"
		}
		return nil, nil, fmt.Errorf("connect to NATS at %s: %w%s", redact(natsURL), err, hint)
	}
	return nc, closed, nil
}

// redact hides passwords in NATS URLs for logs.
func redact(s string) string {
	parts := strings.Split(s, ",")
	for i, p := range parts {
		if u, err := url.Parse(strings.TrimSpace(p)); err == nil && u.User != nil {
			parts[i] = u.Redacted()
		}
	}
	return strings.Join(parts, ",")
}
