package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leaf-nats/leaf/internal/natsserver"
	"github.com/leaf-nats/leaf/kv"
	"github.com/leaf-nats/leaf/segment"
	"github.com/leaf-nats/leaf/segment/pgstore"
	"github.com/leaf-nats/leaf/snowflake"
	"github.com/leaf-nats/leaf/vending"
	"github.com/leaf-nats/leaf/workerid"
)

// serve runs a vendor until ctx ends or a part of it fails for good, then
// shuts it down.
func serve(ctx context.Context, cfg Config, log *slog.Logger) error {
	v, err := openVendor(ctx, cfg, log)
	if err != nil {
		return err
	}
	return errors.Join(v.wait(ctx), v.Close(context.Background()))
}

// drainTimeout bounds the drain of the service's connection at Close.
const drainTimeout = 10 * time.Second

// vendor is a running vendor: what openVendor opened, in that order. Close
// takes it down in the one order that keeps IDs unique and answers every
// request received.
//
// It is not an oklog/run group on purpose: a group interrupts every actor
// at once, while here the service's drain must have answered every request
// it received before the worker ID is released (a later holder may reuse
// it at once), and the stores must outlive the drain that reads them.
type vendor struct {
	cfg Config
	log *slog.Logger

	lock      *natsserver.StoreLock // embedded server's store directory
	srv       *server.Server        // embedded server; nil with LEAF_NATS_URL
	newStore  bool                  // the embedded server's store was created empty by this process
	dataConn  *nats.Conn            // leases and stores; up until the lease is released
	peers     *peerAsker            // asks the live vendors, on dataConn
	guard     *contractGuard
	segs      *segments
	stopClock func()
	keeper    *workerid.Keeper
	leaseTTL  atomic.Int64 // of the last lease claimed, ns
	svcConn   *nats.Conn   // the service's; drained at Close
	svcClosed <-chan struct{}
	svc       *vending.Service
	leafAPI   *leafAPI // nil unless LEAF_HTTP_LEAF_API
	http      *httpServer
}

// openVendor opens a vendor's parts in order: store lock and embedded
// server, data connection, cluster contract and segment store, worker ID,
// service connection, service, HTTP; then it waits for the first worker ID.
// On failure it closes what it opened.
func openVendor(ctx context.Context, cfg Config, log *slog.Logger) (*vendor, error) {
	v := &vendor{cfg: cfg, log: log}
	if err := v.open(ctx); err != nil {
		return nil, errors.Join(err, v.Close(context.Background()))
	}
	return v, nil
}

func (v *vendor) open(ctx context.Context) error {
	cfg, log := v.cfg, v.log
	natsURL := cfg.NATSURL
	if natsURL == "" {
		var err error
		if natsURL, err = v.startEmbedded(); err != nil {
			return err
		}
	}
	// Two connections: the service's is drained at Close while the data
	// connection stays up to release the lease and finish store writes.
	var err error
	if v.dataConn, _, err = connect(natsURL, cfg, "leaf-vendor-data", log); err != nil {
		return err
	}
	v.peers = newPeerAsker(v.dataConn, log)
	js, err := jetstream.New(v.dataConn)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	if err := retryStartup(ctx, log, "reach JetStream", func() error {
		_, err := js.AccountInfo(ctx)
		return err
	}); err != nil {
		return fmt.Errorf("NATS at %s has no JetStream for this account (run nats-server with -js): %w", redact(natsURL), err)
	}
	if err := v.checkReplicas(); err != nil {
		return err
	}
	if err := v.openContractAndSegments(ctx, js); err != nil {
		return err
	}

	clock, stopClock, err := newClock(log)
	if err != nil {
		return err
	}
	v.stopClock = stopClock
	if v.svcConn, v.svcClosed, err = connect(natsURL, cfg, "leaf-vendor", log); err != nil {
		return err
	}
	fc := vending.ForwarderConfig{Prefix: cfg.SubjectPrefix, QueueGroup: cfg.QueueGroup, MaxCount: cfg.MaxRangeBatch,
		ReplyPrefixes: cfg.replyPrefixes(), OwnInboxes: []string{vending.RequestInbox(v.dataConn)}, Logger: log}
	if v.segs.strict, err = openStrict(ctx, cfg, log, js, v.svcConn, v.segs.alloc, v.guard.segmentsErr, fc); err != nil {
		return err
	}
	if v.keeper, err = workerid.Open(v.keeperConfig(js, clock)); err != nil {
		return err
	}
	v.guard.start(func() (int, bool) {
		st := v.keeper.Status()
		return st.ID, st.Held
	})
	if err := checkMaxPayload(cfg.MaxBatch, v.svcConn.MaxPayload()); err != nil {
		return err
	}
	state := newVendorState(v.keeper, v.segs, v.guard, clock, v.svcConn.IsConnected)
	state.leaseTTL = func() time.Duration { return max(cfg.WorkerLeaseTTL, time.Duration(v.leaseTTL.Load())) }
	build := readBuildInfo()
	reg := newRegistry(state, build)
	obs := newRequestMetrics(reg)
	state.requests = obs
	sf := guardedSnowflake{v.keeper, v.guard}
	svcCfg := vending.Config{
		Prefix:        cfg.SubjectPrefix,
		QueueGroup:    cfg.QueueGroup,
		MaxBatch:      cfg.MaxBatch,
		MaxRangeBatch: cfg.MaxRangeBatch,
		Version:       build.Version,
		Snowflake:     sf,
		Epoch:         cfg.Epoch,
		Segments:      v.segs,
		Stats:         state.endpointStats(build),
		Metadata: map[string]string{
			"instance":            state.instance,
			"revision":            build.Revision,
			"go_version":          build.GoVersion,
			"worker_ids":          cfg.WorkerIDRange,
			"epoch":               strconv.FormatInt(cfg.Epoch, 10),
			"snowflake_ends":      snowflakeEnds(cfg.Epoch).Format(time.RFC3339),
			"segment_store":       v.segs.kind,
			vending.MetaRateLimit: strconv.FormatFloat(cfg.SegmentRateLimit, 'g', -1, 64),
			// The worker ID is live state (claimed after the service
			// starts, maybe another after a lost lease): the endpoints'
			// stats carry it; a static one is here too.
			"worker_id": cmp.Or(cfg.WorkerID, "claimed from KV: see each endpoint's stats"),
		},
		Observer:      obs,
		ReplyPrefixes: cfg.replyPrefixes(),
		OwnInboxes:    []string{vending.RequestInbox(v.dataConn)},
		Logger:        log,
	}
	if err := v.peers.quiet(func() (err error) {
		v.svc, err = vending.Start(v.svcConn, svcCfg)
		return err
	}); err != nil {
		return err
	}
	// Leaf's HTTP API takes IDs from the same sources, past the same gates.
	v.leafAPI = newLeafAPI(cfg, sf, v.segs, obs, reg)
	if v.http, err = startHTTP(cfg, state, reg, v.peers, v.leafAPI, log); err != nil {
		return err
	}
	if err := v.waitClaimed(ctx); err != nil {
		return err
	}
	log.Info("vendor serving", "prefix", cfg.SubjectPrefix, "queue_group", cfg.QueueGroup,
		"worker_id", v.keeper.Status().ID, "segments", v.segs.kind)
	return nil
}

// openContractAndSegments opens the cluster contract and the segment store,
// and checks this vendor's settings against the contract before anything is
// claimed or served.
func (v *vendor) openContractAndSegments(ctx context.Context, js jetstream.JetStream) error {
	cfg := v.cfg
	var contracts *kv.Contracts
	if err := retryStartup(ctx, v.log, "open the cluster contract", func() (err error) {
		contracts, err = kv.OpenContracts(ctx, js, cfg.KVReplicas)
		return err
	}); err != nil {
		return err
	}
	// A KV store the contract names is not created again if it is gone: its
	// tags would start over and repeat IDs.
	var recorded kv.Contract
	if err := retryStartup(ctx, v.log, "read the cluster contract", func() (err error) {
		recorded, _, err = contracts.Get(ctx)
		if errors.Is(err, kv.ErrNoContract) {
			return nil
		}
		return err
	}); err != nil {
		return err
	}
	create := cfg.storeKind() != kindKV || !strings.HasPrefix(recorded.Segments, kindKV+":")
	var st segment.AdminStore
	var closeStore func()
	if err := retryStartup(ctx, v.log, "open the segment store", func() (err error) {
		st, closeStore, err = openStore(ctx, cfg, js, create)
		return err
	}); err != nil {
		if !create && errors.Is(err, jetstream.ErrBucketNotFound) {
			g := contractGuard{want: recorded}
			return g.storeLost(err)
		}
		return err
	}
	segs, err := openSegments(ctx, cfg, st, closeStore, v.log)
	if err != nil {
		return err
	}
	v.segs = segs
	peers := func(ctx context.Context) ([]status, error) { return v.livePeers(ctx), nil }
	if v.guard, err = openContractGuard(ctx, cfg, v.log, js, contracts, st, peers); err != nil {
		return err
	}
	segs.gate = v.guard.segmentsErr
	return nil
}

// livePeers returns the status of every live vendor but this one that
// answers in time.
func (v *vendor) livePeers(ctx context.Context) []status {
	rs, _ := liveVendors(ctx, v.peers, snowflake.SystemClock{}, instanceName())
	sts := make([]status, len(rs))
	for i, r := range rs {
		sts[i] = r.st
	}
	return sts
}

// checkReplicas refuses LEAF_KV_REPLICAS above 1 on a NATS server that is
// not clustered: its buckets would never be created.
func (v *vendor) checkReplicas() error {
	if v.cfg.KVReplicas > 1 && v.dataConn.ConnectedClusterName() == "" {
		return fmt.Errorf("LEAF_KV_REPLICAS %d: the NATS server at %s is not in a cluster and keeps one copy of each bucket: set LEAF_KV_REPLICAS=1, or run a NATS cluster of %d or more servers with JetStream",
			v.cfg.KVReplicas, redact(v.dataConn.ConnectedUrl()), v.cfg.KVReplicas)
	}
	return nil
}

// checkMaxPayload refuses a LEAF_MAX_BATCH whose largest reply the server
// would not carry: the IDs would be taken, and the reply lost.
func checkMaxPayload(maxBatch int, maxPayload int64) error {
	need := int64(maxBatch) * maxTextBytes
	if need-1 <= maxPayload {
		return nil
	}
	return fmt.Errorf("LEAF_MAX_BATCH %d: a reply of that many IDs takes up to %d bytes as text, more than the NATS server's max_payload of %d bytes; set LEAF_MAX_BATCH to %d or less, or raise max_payload in the server's configuration",
		maxBatch, need-1, maxPayload, (maxPayload+1)/maxTextBytes)
}

// maxTextBytes is the most an ID takes in a text reply: 19 digits and a
// newline. A binary reply takes 8.
const maxTextBytes = 20

// startEmbedded locks the store directory and starts the embedded server
// on it; it returns the server's client URL.
func (v *vendor) startEmbedded() (string, error) {
	cfg := v.cfg
	lock, err := natsserver.LockStore(cfg.NATSStoreDir)
	if errors.Is(err, natsserver.ErrStoreInUse) {
		join := "join it with LEAF_NATS_URL"
		if url, _ := natsserver.StoreURL(cfg.NATSStoreDir); url != "" {
			join = "join it with LEAF_NATS_URL=" + url
		}
		return "", fmt.Errorf("%w: %s, or give this vendor its own LEAF_NATS_STORE_DIR", err, join)
	}
	if err != nil {
		return "", err
	}
	v.lock = lock
	// No JetStream data yet: this store, and the buckets in it, are new.
	if _, err := os.Stat(filepath.Join(cfg.NATSStoreDir, "jetstream")); errors.Is(err, fs.ErrNotExist) {
		v.newStore = true
	}
	srv, err := natsserver.Start(natsserver.Config{Listen: cfg.NATSListen, StoreDir: cfg.NATSStoreDir, Name: "leaf-embedded"})
	if errors.Is(err, natsserver.ErrAddrInUse) {
		return "", fmt.Errorf("embedded NATS on %s: %w (another nats-server or vendor?): set LEAF_NATS_LISTEN to a free address, or LEAF_NATS_URL to use the server there",
			cfg.NATSListen, err)
	}
	if err != nil {
		return "", err
	}
	v.srv = srv
	if err := lock.SetURL(srv.ClientURL()); err != nil {
		return "", fmt.Errorf("store directory lock: %w", err)
	}
	v.log.Info("embedded NATS server started", "url", srv.ClientURL(), "store_dir", cfg.NATSStoreDir)
	return srv.ClientURL(), nil
}

// keeperConfig configures the worker-ID keeper: claims in
// LEAF_WORKER_ID_RANGE, or the static LEAF_WORKER_ID.
func (v *vendor) keeperConfig(js jetstream.JetStream, clock snowflake.Clock) workerid.Config {
	cfg := v.cfg
	ids, _ := cfg.workerIDRange() // checked by validate
	kc := workerid.Config{
		Claim: v.claimer(js, clock),
		IDs:   &ids,
		Generator: snowflake.Settings{
			Epoch:       cfg.Epoch,
			Clock:       clock,
			MaxBackward: cfg.maxBackward(),
		},
		Logger: v.log,
	}
	if id, _ := cfg.staticWorkerID(); id >= 0 {
		kc.Static = &workerid.Static{ID: id, File: cfg.workerFile(id)}
	}
	// Requests arrive on the service's connection. Reconnected to a
	// single server, which may be a new one that lost every lease (an
	// embedded server restarted on a wiped store), no ID is made until the
	// lease is renewed there. The nodes of a cluster keep their state.
	if nc := v.svcConn; nc.ConnectedClusterName() == "" {
		kc.Fence = func() uint64 { return nc.Stats().Reconnects }
	}
	return kc
}

// waitClaimed waits for the first worker ID. Meanwhile the service answers
// snowflake requests with a 503 that says why, and /readyz too.
func (v *vendor) waitClaimed(ctx context.Context) error {
	select {
	case <-v.keeper.Claimed():
		return nil
	case <-v.keeper.Done():
		return v.keeper.Err()
	case <-v.guard.Done():
		return v.guard.Err()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// claimer returns the Keeper's claim: a lease in bucket leaf_workers, once
// the cluster contract is checked and after a check of this clock against
// the server's and the live peers'. Errors that waiting cannot fix are
// marked permanent, so that a misconfigured vendor exits at once with the
// setting to change.
func (v *vendor) claimer(js jetstream.JetStream, clock snowflake.Clock) func(context.Context, workerid.ClaimRequest) (workerid.Holder, error) {
	cfg := v.cfg
	static, _ := cfg.staticWorkerID()
	base := kv.LeaseConfig{
		TTL:      cfg.WorkerLeaseTTL,
		Replicas: cfg.KVReplicas,
		Holder:   instanceName(),
		Clock:    clock,
		Epoch:    cfg.Epoch,
		WaitHeld: static >= 0,
	}
	// Only the first claim is in the store as this process created it.
	var claimed atomic.Bool
	return func(ctx context.Context, r workerid.ClaimRequest) (workerid.Holder, error) {
		if err := v.guard.snowflakeErr(); err != nil {
			r.Report(err.Error())
			return nil, err
		}
		samples, peers, err := sampleClocks(ctx, v.peers, js, clock, instanceName())
		if err != nil {
			return nil, err
		}
		ahead, err := checkClocks(samples, cfg.ClockMaxSkew)
		if err != nil {
			r.Report(err.Error())
			return nil, err
		}
		lc := base
		lc.IDs, lc.ClockAhead, lc.Report = &r.IDs, ahead, r.Report
		// Buckets created again after a loss: earlier holders may hold
		// leases as long as any vendor of the cluster was given.
		lc.LongestLease = max(cfg.WorkerLeaseTTL, v.guard.leaseTTL())
		for _, p := range peers {
			lc.LongestLease = max(lc.LongestLease, p.Worker.LeaseTTL)
		}
		if len(samples) > 0 {
			// This clock agrees with the server's and the peers': a last
			// timestamp ahead of it is an earlier holder's clock having run
			// ahead, and waiting for it is safe.
			lc.MaxWait = clockAgreedWait
		}
		if v.newStore && !claimed.Load() {
			// Vendors attached to an earlier server on this address may
			// have used any millisecond up to now plus their clocks'
			// skew: each kept within LEAF_CLOCK_MAX_SKEW of that server,
			// which ran on this host.
			lc.NewStore, lc.ClockAhead = true, max(ahead, cfg.ClockMaxSkew+clockMargin)
		}
		l, err := kv.Claim(ctx, js, lc)
		switch {
		case err == nil:
		case errors.Is(err, kv.ErrHeldByLive):
			return nil, workerid.Permanent(fmt.Errorf("LEAF_WORKER_ID %d is held by another live worker (%s): pin another ID of LEAF_WORKER_ID_RANGE, or stop that worker",
				static, strings.TrimPrefix(err.Error(), kv.ErrHeldByLive.Error()+": ")))
		case errors.Is(err, kv.ErrNoFreeWorkerID):
			return nil, fmt.Errorf("%w; waiting for one (LEAF_WORKER_ID_RANGE is %s)", err, cfg.WorkerIDRange)
		case errors.Is(err, workerid.ErrClockBehind) && len(samples) > 0:
			return nil, workerid.Permanent(fmt.Errorf("%w; this host's clock agrees with %s, so an earlier holder's clock ran that far ahead (or it vended with a later LEAF_EPOCH): waiting so long is not worth it; give this vendor worker IDs no one used lately (LEAF_WORKER_ID_RANGE, LEAF_WORKER_ID)",
				err, samples[0].who))
		case permanent(err):
			return nil, workerid.Permanent(err)
		default:
			return nil, err
		}
		// A live vendor that can still vend with this worker ID keeps it
		// in another JetStream: within one, the claim waited until every
		// earlier holder's deadline had passed.
		if why := vendingWith(v.livePeers(ctx), l.ID()); why != "" {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			l.Release(rctx, l.Last())
			return nil, workerid.Permanent(errors.New(why))
		}
		claimed.Store(true)
		v.leaseTTL.Store(int64(l.TTL()))
		if l.TTL() != cfg.WorkerLeaseTTL {
			v.log.Warn("the lease TTL is the one bucket leaf_workers keeps, not LEAF_WORKER_LEASE_TTL; to change it: vendor cluster set-lease-ttl "+cfg.WorkerLeaseTTL.String(),
				"bucket_ttl", l.TTL(), "configured", cfg.WorkerLeaseTTL)
		}
		return l, nil
	}
}

// clockAgreedWait is how long a claim waits for a worker ID's last
// timestamp when this clock agrees with the NATS server's and the peers':
// the time an earlier holder's clock ran ahead, or its later epoch.
const clockAgreedWait = 2 * time.Minute

// wait returns when ctx ends (nil), the worker-ID keeper gives up, or the
// contract guard finds a disagreement that waiting cannot fix.
func (v *vendor) wait(ctx context.Context) error {
	select {
	case <-ctx.Done():
		v.log.Info("signal received: draining")
		return nil
	case <-v.keeper.Done():
		err := v.keeper.Err()
		v.log.Error("worker ID keeper stopped: draining", "err", err)
		return err
	case <-v.guard.Done():
		err := v.guard.Err()
		v.log.Error("this vendor no longer agrees with the cluster contract: draining", "err", err)
		return err
	}
}

// Close shuts the vendor down in order: step down from leading strict tags
// (releasing their leases), stop the service's endpoints and drain its
// connection (every request received is answered), release the
// worker ID (recording its true last millisecond), close the segment store,
// the HTTP server, the data connection and the embedded server, and unlock
// the store directory. It returns every error on the way.
func (v *vendor) Close(ctx context.Context) error {
	var errs []error
	if v.segs != nil && v.segs.strict != nil {
		// First, so that the other vendors lead this one's strict tags
		// at once; its requests in flight go to them meanwhile.
		if err := v.segs.strict.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("stop leading strict tags: %w", err))
		}
	}
	if v.svc != nil {
		if err := v.svc.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("stop the service: %w", err))
		}
	}
	if v.svcConn != nil {
		if err := v.svcConn.Drain(); err != nil {
			errs = append(errs, fmt.Errorf("drain the service's NATS connection: %w", err))
		}
		select {
		case <-v.svcClosed:
			v.log.Info("drained: in-flight requests answered")
		case <-time.After(drainTimeout):
			errs = append(errs, fmt.Errorf("the drain did not finish within %v", drainTimeout))
			v.svcConn.Close()
		}
	}
	if v.leafAPI != nil {
		v.leafAPI.close() // its requests are answered before the worker ID goes
	}
	if v.keeper != nil {
		if err := v.keeper.Close(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if v.guard != nil {
		v.guard.Close()
	}
	if v.segs != nil {
		v.segs.Close()
	}
	if v.http != nil {
		v.http.close()
	}
	if v.stopClock != nil {
		v.stopClock()
	}
	if v.dataConn != nil {
		v.dataConn.Close()
	}
	if v.srv != nil {
		v.srv.Shutdown()
		v.srv.WaitForShutdown()
		v.log.Info("embedded NATS server stopped")
	}
	if v.lock != nil {
		if err := v.lock.Close(); err != nil {
			errs = append(errs, fmt.Errorf("unlock the store directory: %w", err))
		}
	}
	return errors.Join(errs...)
}

// startupBudget is how long start-up steps are retried: on a fresh cluster
// the replicated buckets have no leader for a few seconds.
const startupBudget = 30 * time.Second

// permanent reports whether a start-up error is one that waiting cannot fix.
func permanent(err error) bool {
	var mismatch *mismatchError
	return errors.As(err, &mismatch) || errors.Is(err, workerid.ErrClockBehind) ||
		errors.Is(err, kv.ErrReplicas) || errors.Is(err, pgstore.ErrRefused) ||
		errors.Is(err, snowflake.ErrSettings) || errors.Is(err, jetstream.ErrJetStreamNotEnabled) ||
		errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount)
}

// retryStartup runs f until it succeeds, fails for good, or startupBudget
// passes.
func retryStartup(ctx context.Context, log *slog.Logger, what string, f func() error) error {
	deadline := time.Now().Add(startupBudget)
	for backoff := 100 * time.Millisecond; ; backoff = min(2*backoff, 2*time.Second) {
		err := f()
		switch {
		case err == nil:
			return nil
		case permanent(err), ctx.Err() != nil, time.Now().Add(backoff).After(deadline):
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
	var waitedDenied atomic.Bool
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
			if isStatsDenial(err) {
				return // the peerAsker says it once
			}
			if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), `"`+cfg.SubjectPrefix+".waited.") {
				// Once per slow request: say it once.
				if waitedDenied.CompareAndSwap(false, true) {
					log.Warn("NATS refuses this vendor's notes of the replies that waited for the store: clients are answered, but `nats micro stats` misses their errors. Grant this vendor's NATS user publish on "+cfg.SubjectPrefix+".waited.> (docs/security.md)", "conn", name)
				}
				return
			}
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
		return nil, nil, fmt.Errorf("connect to NATS at %s: %w%s", redact(natsURL), err, connectHint(err))
	}
	return nc, closed, nil
}

// connectHint says what to check after a failed first connection.
func connectHint(err error) string {
	var (
		certErr    *tls.CertificateVerificationError
		unknownCA  x509.UnknownAuthorityError
		hostErr    x509.HostnameError
		invalidErr x509.CertificateInvalidError
		alertErr   tls.AlertError
		recordErr  tls.RecordHeaderError
	)
	switch {
	case errors.Is(err, nats.ErrAuthorization), errors.Is(err, nats.ErrAuthExpired),
		errors.Is(err, nats.ErrAuthRevoked), errors.Is(err, nats.ErrAccountAuthExpired):
		return " (the server refused the credentials: check the URL's user:password, LEAF_NATS_CREDS, LEAF_NATS_NKEY, LEAF_NATS_USER/PASSWORD or LEAF_NATS_TOKEN)"
	case errors.As(err, &certErr), errors.As(err, &unknownCA), errors.As(err, &hostErr),
		errors.As(err, &invalidErr), errors.As(err, &alertErr), errors.As(err, &recordErr),
		errors.Is(err, nats.ErrSecureConnRequired), errors.Is(err, nats.ErrSecureConnWanted):
		return " (TLS failed: check that LEAF_NATS_TLS_CA trusts the server's certificate and that LEAF_NATS_TLS_CERT/KEY hold a client certificate the server trusts)"
	case errors.Is(err, nats.ErrNoServers):
		return " (is a NATS server running there? leave LEAF_NATS_URL empty for an embedded one)"
	}
	return ""
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
