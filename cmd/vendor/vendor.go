package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/leaf-nats/leaf/admin"
	"github.com/leaf-nats/leaf/cluster"
	"github.com/leaf-nats/leaf/internal/natsserver"
	"github.com/leaf-nats/leaf/kv"
	"github.com/leaf-nats/leaf/leafcompat"
	"github.com/leaf-nats/leaf/segment"
	"github.com/leaf-nats/leaf/snowflake"
	"github.com/leaf-nats/leaf/status"
	"github.com/leaf-nats/leaf/storedir"
	"github.com/leaf-nats/leaf/strict"
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

// vendor is a running vendor: what openVendor opened, in that order. Each
// part gets what it needs when it is made; Close takes them down in the one
// order that keeps IDs unique and answers every request received.
//
// It is not an oklog/run group on purpose: a group interrupts every actor
// at once, while here the service's drain must have answered every request
// it received before the worker ID is released (a later holder may reuse
// it at once), and the stores must outlive the drain that reads them.
type vendor struct {
	cfg Config
	log *slog.Logger

	record     *storedir.Record      // what was handed out from the embedded store, kept beside it
	lock       *natsserver.StoreLock // embedded server's store directory
	watch      *storedir.Watch       // says when the embedded store is gone; nil with LEAF_NATS_URL
	srv        *server.Server        // embedded server; nil with LEAF_NATS_URL
	dataConn   *nats.Conn            // leases and stores; up until the lease is released
	svcConn    *nats.Conn            // the service's and the vendors' exchange; drained at Close
	svcClosed  <-chan struct{}
	stopClock  func()
	guard      *cluster.Guard
	store      segment.AdminStore
	closeStore func()
	alloc      *segment.Allocator
	peerMarks  *cluster.PeerMarks // the KV store's marks; nil with Postgres
	strict     *strictTags
	segs       *strict.Segments // what the service serves: alloc, strict tags through their leaders
	keeper     *workerid.Keeper
	build      buildInfo
	reg        *prometheus.Registry
	obs        *status.Metrics // counts what the service and the forwarder answer and drop
	svc        *vending.Service
	leafAPI    *leafcompat.API // nil unless LEAF_HTTP_LEAF_API
	state      *status.State   // what /readyz and the status page say
	serving    bool            // "vendor serving" was logged (announce)
	http       *status.Server  // nil unless LEAF_HTTP_ADDR
	history    *status.History // the status page's charts; nil unless LEAF_HTTP_ADDR
}

// openVendor opens a vendor's parts in order: store lock and embedded
// server, connections, segment store, cluster guard, segments, worker-ID
// keeper, service, HTTP; then it waits for the first worker ID. On failure
// it closes what it opened.
func openVendor(ctx context.Context, cfg Config, log *slog.Logger) (*vendor, error) {
	v := &vendor{cfg: cfg, log: log}
	if err := v.open(ctx); err != nil {
		return nil, errors.Join(err, v.Close(context.Background()))
	}
	return v, nil
}

func (v *vendor) open(ctx context.Context) error {
	cfg, log := v.cfg, v.log
	v.build = readBuildInfo()
	v.reg, v.obs = status.NewRegistry(status.Build(v.build))
	if cfg.HTTPAddr != "" {
		// Up first: health and readiness say what the start does.
		sc := status.ServerConfig{Addr: cfg.HTTPAddr, MaxConns: httpMaxConns(cfg.HTTPMaxConns, v.log), Logger: v.log}
		var err error
		if v.http, err = status.OpenServer(sc); err != nil {
			return err
		}
	}
	js, err := v.connect(ctx)
	if err != nil {
		return err
	}
	clock, stopClock, err := newClock(log)
	if err != nil {
		return err
	}
	v.stopClock = stopClock
	if err := v.seedClocks(ctx, js, clock); err != nil {
		return err
	}
	contracts, err := v.openStore(ctx, js)
	if err != nil {
		return err
	}
	replies := vending.NewReplies(cfg.replyPrefixes(), []string{vending.RequestInbox(v.dataConn)})
	if v.guard, err = cluster.Open(ctx, v.guardConfig(js, contracts, clock, replies)); err != nil {
		return err
	}
	if err := v.openAllocator(ctx, js, replies); err != nil {
		return err
	}
	if v.strict, err = v.openStrict(ctx, js, v.forwarderConfig(), clock); err != nil {
		return err
	}
	v.segs = strict.NewSegments(v.alloc, v.strict.Leaders, v.guard)
	if v.keeper, err = workerid.Open(v.keeperConfig(clock)); err != nil {
		return err
	}
	if err := v.startService(clock); err != nil {
		return err
	}
	if err := v.waitClaimed(ctx); err != nil {
		return err
	}
	v.svc.CheckReadiness() // snowflake served from now, not at the next look
	v.serving = v.announce(true)
	return nil
}

// announce logs "vendor serving" when /readyz says ready, and reports
// whether it did. At start, a vendor not yet ready says instead which mode
// it does not serve and why; wait announces it once it is.
func (v *vendor) announce(start bool) bool {
	cfg := v.cfg
	args := []any{"prefix", cfg.SubjectPrefix, "queue_group", cfg.QueueGroup, "worker_id", v.keeper.Status().ID, "segments", cfg.storeKind()}
	not := v.state.NotReady()
	if not == (status.ModeReadiness{}) {
		v.log.Info("vendor serving", args...)
		return true
	}
	if !start {
		return false
	}
	if not.Snowflake != "" {
		args = append(args, "snowflake_not_served", not.Snowflake)
	}
	if not.Segments != "" {
		args = append(args, "segments_not_served", not.Segments)
	}
	v.log.Warn("vendor started but not ready: /readyz answers 503 until it is", args...)
	return false
}

// connect starts the embedded server unless LEAF_NATS_URL names one, makes
// the two connections (the service's is drained at Close while the data
// connection stays up to release the lease and finish store writes), and
// checks that JetStream is there and can keep what the vendor asks of it.
func (v *vendor) connect(ctx context.Context) (kv.JS, error) {
	cfg := v.cfg
	natsURL := cfg.NATSURL
	if natsURL == "" {
		var err error
		if natsURL, err = v.startEmbedded(); err != nil {
			return kv.JS{}, err
		}
	}
	var err error
	if v.dataConn, _, err = connect(natsURL, cfg, "leaf-vendor-data", v.log); err != nil {
		return kv.JS{}, err
	}
	if v.svcConn, v.svcClosed, err = connect(natsURL, cfg, "leaf-vendor", v.log); err != nil {
		return kv.JS{}, err
	}
	js, err := jetstream.New(v.dataConn)
	if err != nil {
		return kv.JS{}, fmt.Errorf("jetstream: %w", err)
	}
	if err := v.retry(ctx, "reach JetStream", func() error {
		// Short: a refused request is not answered, it times out.
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := js.AccountInfo(actx)
		var api *jetstream.APIError
		if errors.As(err, &api) && api.ErrorCode == jsClusterNotAvailable {
			// JetStream is there, with no meta leader (a supercluster
			// split by a partition): the buckets that exist serve.
			v.log.Warn("JetStream has no meta leader now (a partition?): starting with the buckets that exist", "err", err)
			return nil
		}
		return err
	}); err != nil {
		if errors.Is(err, errDenied) {
			return kv.JS{}, err
		}
		return kv.JS{}, fmt.Errorf("NATS at %s has no JetStream for this account (run nats-server with -js, or enable JetStream for the account): %w", redact(natsURL), err)
	}
	if err := v.checkReplicas(); err != nil {
		return kv.JS{}, err
	}
	if v.srv == nil {
		v.checkSync()
	}
	return kv.JS{JetStream: js, Names: cfg.kvNames(v.dataConn.ConnectedClusterName())}, checkMaxPayload(cfg.MaxBatch, v.svcConn.MaxPayload())
}

// jsClusterNotAvailable is nats-server's JSClusterNotAvailErr: "JetStream
// system temporarily unavailable", a clustered JetStream with no meta
// leader, which answers no account info but serves the streams it has.
const jsClusterNotAvailable jetstream.ErrorCode = 10008

// openStore opens the cluster contract's bucket and the segment store. A
// KV store the contract names is not created again if it is gone: its tags
// would start over and repeat IDs.
func (v *vendor) openStore(ctx context.Context, js kv.JS) (*kv.Contracts, error) {
	cfg := v.cfg
	var contracts *kv.Contracts
	if err := v.retry(ctx, "open the cluster contract", func() (err error) {
		contracts, err = kv.OpenContracts(ctx, js, cfg.KVReplicas)
		return err
	}); err != nil {
		return nil, err
	}
	var recorded kv.Contract
	if err := v.retry(ctx, "read the cluster contract", func() (err error) {
		recorded, _, err = contracts.Get(ctx)
		if errors.Is(err, kv.ErrNoContract) || errors.Is(err, kv.ErrCorrupt) {
			return nil // the guard records it
		}
		return err
	}); err != nil {
		return nil, err
	}
	create := cfg.storeKind() != cluster.KindKV || !cluster.NamesKind(recorded.Segments, cluster.KindKV)
	if err := v.retry(ctx, "open the segment store", func() (err error) {
		v.store, v.closeStore, err = admin.OpenStore(ctx, cfg.PostgresURL, cfg.KVReplicas, js, create)
		return err
	}); err != nil {
		if !create && errors.Is(err, jetstream.ErrBucketNotFound) {
			return nil, cluster.StoreLost(recorded.Segments, js.Segments, err)
		}
		return nil, err
	}
	return contracts, nil
}

// guardConfig configures the cluster guard: this vendor's terms, its claims'
// settings, and where it finds the contract, its store and its peers.
func (v *vendor) guardConfig(js kv.JS, contracts *kv.Contracts, clock snowflake.Clock, replies *vending.Replies) cluster.Config {
	cfg := v.cfg
	static, _ := cfg.staticWorkerID()
	return cluster.Config{
		Terms: cfg.terms(),
		Kind:  cfg.storeKind(),
		Self:  instanceName(),
		Lease: kv.LeaseConfig{
			TTL:      cfg.WorkerLeaseTTL,
			Replicas: cfg.KVReplicas,
			Holder:   instanceName(),
			Clock:    clock,
			Epoch:    cfg.Epoch,
			WaitHeld: static >= 0,
			Logger:   v.log,
		},
		MaxSkew:   cfg.ClockMaxSkew,
		JS:        js,
		Contracts: contracts,
		Store:     v.store,
		Conn:      v.svcConn,
		Prefix:    cfg.SubjectPrefix,
		Replies:   replies,
		Logger:    v.log,
		Local:     v.local(),
	}
}

// local is the embedded store as the guard's gates see it: nil with
// LEAF_NATS_URL (a nil *storedir.Watch in the interface would not be).
func (v *vendor) local() cluster.Local {
	if v.watch == nil {
		return nil
	}
	return v.watch
}

// forwarderConfig configures the strict tags' forwarder.
func (v *vendor) forwarderConfig() strict.ForwarderConfig {
	cfg := v.cfg
	return strict.ForwarderConfig{Prefix: cfg.SubjectPrefix, QueueGroup: cfg.QueueGroup, MaxCount: cfg.MaxRangeBatch, MaxBatch: cfg.MaxBatch,
		ReplyPrefixes: cfg.replyPrefixes(), OwnInboxes: []string{vending.RequestInbox(v.dataConn)}, Gate: v.guard, Observer: v.obs, Logger: v.log}
}

// startService starts the metrics, the micro service and the HTTP server
// with the history of its charts.
func (v *vendor) startService(clock snowflake.Clock) error {
	cfg, build, reg, obs := v.cfg, v.build, v.reg, v.obs
	state := status.NewState(status.Sources{
		Instance: instanceName(), Keeper: v.keeper, Allocator: v.alloc, Store: v.store, StoreKind: cfg.storeKind(),
		Guard: v.guard, Clock: clock, Connected: v.svcConn.IsConnected, LeaseTTL: cfg.WorkerLeaseTTL, Requests: obs,
		Leaders: v.strict,
	})
	reg.MustRegister(state.Collector())
	v.state = state
	sf := v.guard.Snowflake(v.keeper)
	layout, _ := cfg.layout() // checked by validate
	var err error
	// A vendor of a region leaves a mode it cannot serve, for the regions
	// that can; alone, it stays and answers 503, which says why.
	var readiness vending.Readiness
	if _, ok, _ := cfg.region(); ok {
		readiness = state
	}
	v.svc, err = vending.Open(v.svcConn, vending.Config{
		Prefix:        cfg.SubjectPrefix,
		QueueGroup:    cfg.QueueGroup,
		MaxBatch:      cfg.MaxBatch,
		MaxRangeBatch: cfg.MaxRangeBatch,
		Version:       build.Version,
		Snowflake:     sf,
		Epoch:         cfg.Epoch,
		Layout:        layout,
		Region:        cfg.vendingRegion(),
		Segments:      v.segs,
		Stats:         state.EndpointStats(build.Version),
		Metadata:      v.metadata(build),
		Observer:      obs,
		ReplyPrefixes: cfg.replyPrefixes(),
		OwnInboxes:    []string{vending.RequestInbox(v.dataConn)},
		Logger:        v.log,

		Readiness:          readiness,
		RequesterRateLimit: cfg.RequesterRateLimit,
		RequesterRateBurst: cfg.RequesterRateBurst,
	})
	if err != nil || v.http == nil {
		return err
	}
	v.history = status.OpenHistory(status.HistoryConfig{Requests: obs, Allocator: v.alloc})
	h := status.Handlers{State: state, Registry: reg, Peers: status.NewStatsAsker(v.dataConn, v.log), History: v.history}
	if cfg.HTTPLeafAPI {
		// Leaf's HTTP API takes IDs from the same sources, past the same
		// gates.
		v.leafAPI = leafcompat.New(sf, v.segs, obs, reg)
		h.API = v.leafAPI
		v.log.Info("serving Leaf's HTTP API (LEAF_HTTP_LEAF_API)", "segment", "http://"+v.http.Addr()+leafcompat.SegmentPath+"<tag>", "snowflake", "http://"+v.http.Addr()+leafcompat.SnowflakePath+"<key>")
	}
	v.http.Serve(h)
	return nil
}

// metadata is what `nats micro info leaf` shows of this vendor.
func (v *vendor) metadata(build buildInfo) map[string]string {
	cfg := v.cfg
	layout, _ := cfg.layout() // checked by validate
	return map[string]string{
		"instance":             instanceName(),
		"revision":             build.Revision,
		"go_version":           build.GoVersion,
		"worker_ids":           cfg.workerIDs(),
		"epoch":                strconv.FormatInt(cfg.Epoch, 10),
		"snowflake_ends":       status.SnowflakeEnds(cfg.Epoch, layout).Format(time.RFC3339),
		"segment_store":        cfg.storeKind(),
		"region":               cfg.terms().Region,
		vending.MetaRateLimit:  strconv.FormatFloat(cfg.SegmentRateLimit, 'g', -1, 64),
		vending.MetaRateBurst:  strconv.FormatFloat(cfg.segmentRateBurst(), 'g', -1, 64),
		"requester_rate_limit": strconv.FormatFloat(cfg.RequesterRateLimit, 'g', -1, 64),
		// The worker ID is live state (claimed after the service starts,
		// maybe another after a lost lease): the endpoints' stats carry
		// it; a static one is here too.
		"worker_id": cmp.Or(cfg.WorkerID, "claimed from KV: see each endpoint's stats"),
	}
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

// seedClocks bounds, in an embedded server's store where no vendor ever
// recorded a worker ID's last timestamp, the timestamps of worker IDs it
// has no record of (kv.SeedClocks): by this clock, plus the skew other
// vendors' clocks may have; none when the server listens on loopback, where
// every vendor attached to an earlier server at the address ran on this
// host. Claims then wait that little instead of a lease TTL, now and at
// every later start, a start that failed included.
func (v *vendor) seedClocks(ctx context.Context, js kv.JS, clock snowflake.Clock) error {
	if v.srv == nil {
		return nil
	}
	skew := v.cfg.ClockMaxSkew
	if loopback(v.cfg.NATSListen) {
		skew = 0
	}
	bound := clock.Now().Add(skew + cluster.ClockMargin).UnixMilli()
	lc := v.guardConfig(js, nil, clock, nil).Lease
	return v.retry(ctx, "seed the worker IDs' last timestamps", func() error {
		_, err := kv.SeedClocks(ctx, js, lc, bound)
		return err
	})
}

// startEmbedded locks the store directory and the record kept beside it
// (whose lock outlives the directory), starts the embedded server on the
// directory and watches it; it returns the server's client URL.
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
	if v.record, err = storedir.Open(cfg.NATSStoreDir); err != nil {
		return "", err
	}
	if !loopback(cfg.NATSListen) {
		// The embedded server has no users: anyone who reaches it can
		// delete the buckets that uniqueness rests on, or vend.
		v.log.Warn("embedded NATS listens beyond loopback with no authentication", "listen", cfg.NATSListen,
			"risk", "anyone who reaches it can rewrite the state IDs rest on, or vend",
			"hint", "set LEAF_NATS_LISTEN=127.0.0.1:4222, or run nats-server with docs/nats-server.conf and set LEAF_NATS_URL (docs/security.md)")
	}
	srv, err := natsserver.Start(natsserver.Config{Listen: cfg.NATSListen, StoreDir: cfg.NATSStoreDir, Name: natsserver.EmbeddedName})
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
	if v.watch, err = v.record.Watch(srv, lock.Path(), v.log); err != nil {
		return "", err
	}
	v.log.Info("embedded NATS server started", "url", srv.ClientURL(), "store_dir", cfg.NATSStoreDir, "record", v.record.Path())
	return srv.ClientURL(), nil
}

// loopback says whether a listen address (host:port) is reachable from
// this host only.
func loopback(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	return err == nil && (host == "localhost" || net.ParseIP(host).IsLoopback())
}

// keeperConfig configures the worker-ID keeper: claims through the
// guard, in LEAF_WORKER_ID_RANGE or of the static LEAF_WORKER_ID.
func (v *vendor) keeperConfig(clock snowflake.Clock) workerid.Config {
	cfg := v.cfg
	ids, _ := cfg.workerIDRange() // checked by validate
	layout, _ := cfg.layout()
	kc := workerid.Config{
		Claim: v.guard.Claim,
		IDs:   &ids,
		Generator: snowflake.Settings{
			Epoch:       cfg.Epoch,
			Layout:      layout,
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

// wait returns when ctx ends (nil), the worker-ID keeper gives up, or the
// guard finds a disagreement that waiting cannot fix. A vendor that started
// not ready looks every second meanwhile, to say "vendor serving" once it is.
func (v *vendor) wait(ctx context.Context) error {
	var notServing <-chan time.Time // until "vendor serving" is logged
	if !v.serving {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		notServing = t.C
	}
	for {
		select {
		case <-notServing:
			if v.serving = v.announce(false); v.serving {
				notServing = nil
			}
		case <-ctx.Done():
			v.log.Info("signal received: draining")
			return nil
		case <-v.keeper.Done():
			err := v.keeper.Err()
			v.log.Error("worker ID keeper stopped: draining", "err", err)
			return err
		case <-v.guard.Done():
			err := v.guard.Err()
			v.log.Error("this vendor no longer agrees with the cluster contract: draining", cluster.ErrAttr(err))
			return err
		}
	}
}
