// Package admin carries out the operators' commands (vendor tags, vendor
// cluster) on the state a vendor configuration names: the NATS it would
// use (a running vendor's embedded server, or its store directory when
// none runs), the cluster contract there, and the segment store. OpenStore
// opens that segment store, for the vendor too.
package admin

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leaf-nats/leaf/cluster"
	"github.com/leaf-nats/leaf/internal/natsserver"
	"github.com/leaf-nats/leaf/kv"
	"github.com/leaf-nats/leaf/segment"
	"github.com/leaf-nats/leaf/segment/kvstore"
	"github.com/leaf-nats/leaf/segment/pgstore"
)

var (
	_ segment.AdminStore = (*pgstore.Store)(nil)
	_ segment.AdminStore = (*kvstore.Store)(nil)
)

// Env is the environment a command acts in: what a vendor with the same
// configuration would use.
type Env struct {
	NATSURL  string // LEAF_NATS_URL; "" for the embedded server's store in StoreDir
	StoreDir string // LEAF_NATS_STORE_DIR
	// Listen is LEAF_NATS_LISTEN: where a vendor running with the embedded
	// server (from another directory) is found when StoreDir is not there.
	Listen      string
	NATSOptions []nats.Option // authentication and TLS
	PostgresURL string        // LEAF_POSTGRES_URL; "" keeps segments in JetStream KV
	KVReplicas  int           // of a KV segment store the command creates
	// Terms are what the vendors of this environment vend by (the segment
	// store is filled in from it).
	Terms cluster.Terms
	// LeaseTTL and MaxSkew are LEAF_WORKER_LEASE_TTL and
	// LEAF_CLOCK_MAX_SKEW.
	LeaseTTL, MaxSkew time.Duration
	// Self names who runs the command, in the contract's history.
	Self string
	// Region is LEAF_REGION: its buckets are the region's (kv.RegionNames).
	Region string
	// Prefix is LEAF_SUBJECT_PREFIX: vendor cluster show asks the vendors
	// on its peers' exchange; "" asks none.
	Prefix string
}

// StoreKind is the kind of segment store env names.
func (e Env) StoreKind() string {
	if e.PostgresURL != "" {
		return cluster.KindPostgres
	}
	return cluster.KindKV
}

// ErrUsage is wrapped by errors in a command's arguments.
var ErrUsage = errors.New("admin: usage")

func usagef(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrUsage}, a...)...)
}

// ErrNoStore is returned when the embedded store directory does not exist
// and the command may not create it.
var ErrNoStore = errors.New("no store")

// OpenStore opens the segment store postgresURL names (Postgres), or the
// JetStream KV bucket of js when it is empty, which it creates (with
// replicas copies) when missing only if create: a KV store the cluster
// contract names is never created again empty. close releases it.
func OpenStore(ctx context.Context, postgresURL string, replicas int, js kv.JS, create bool) (st segment.AdminStore, close func(), err error) {
	if postgresURL != "" {
		pg, err := pgstore.Open(postgresURL)
		if err != nil {
			return nil, nil, err
		}
		return pg, func() { pg.Close() }, nil
	}
	var ks *kvstore.Store
	if create {
		ks, err = kvstore.New(ctx, js, replicas)
	} else {
		ks, err = kvstore.Open(ctx, js)
	}
	if err != nil {
		return nil, nil, err
	}
	return ks, func() {}, nil
}

// Admin is a command's view of an environment: its NATS and what is there.
type Admin struct {
	env   Env
	nc    *nats.Conn
	js    kv.JS
	where string // the NATS, for messages

	stopServer func()
}

// Redact hides passwords in NATS URLs for messages.
func Redact(s string) string {
	parts := strings.Split(s, ",")
	for i, p := range parts {
		if u, err := url.Parse(strings.TrimSpace(p)); err == nil && u.User != nil {
			parts[i] = u.Redacted()
		}
	}
	return strings.Join(parts, ",")
}

// Open connects to the NATS a vendor of env would use. For the
// embedded default it goes through the vendor that holds
// LEAF_NATS_STORE_DIR (its lock file names its address); when there is no
// such directory, through a vendor's embedded server at LEAF_NATS_LISTEN
// (one started in another directory); else it opens the directory itself
// and holds it meanwhile. create allows a directory that does not exist
// yet, when no vendor answers at LEAF_NATS_LISTEN.
func Open(env Env, create bool, hint func(error) string) (*Admin, error) {
	a := &Admin{env: env, stopServer: func() {}}
	natsURL := env.NATSURL
	a.where = "NATS at " + Redact(natsURL)
	if natsURL == "" {
		var err error
		if natsURL, a.where, a.stopServer, err = embedded(env, create); err != nil {
			return nil, err
		}
	}
	var err error
	if a.nc, err = nats.Connect(natsURL, append(env.NATSOptions, nats.Name("leaf-admin"))...); err != nil {
		a.stopServer()
		return nil, fmt.Errorf("connect to %s: %w%s", a.where, err, hint(err))
	}
	js, err := jetstream.New(a.nc)
	if err != nil {
		a.Close()
		return nil, err
	}
	a.js = kv.JS{JetStream: js, Names: envNames(env, a.nc)}
	return a, nil
}

// envNames are the buckets of env's region, placed in the NATS cluster nc
// is connected to, or the plain ones.
func envNames(env Env, nc *nats.Conn) kv.Names {
	if env.Region != "" {
		return kv.RegionNames(env.Region, nc.ConnectedClusterName())
	}
	return kv.PlainNames()
}

// embedded returns the URL of the embedded store env names, where it is
// and what stops the server embedded started for it (see Open).
func embedded(env Env, create bool) (url, where string, stop func(), err error) {
	stop = func() {}
	dir, err := filepath.Abs(env.StoreDir)
	if err != nil {
		return "", "", stop, err
	}
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		if url := vendorAt(env); url != "" {
			return url, "the vendor's embedded server at " + url, stop, nil
		}
		if !create {
			return "", "", stop, fmt.Errorf("%w at %s, and no vendor's embedded server at LEAF_NATS_LISTEN (%s): "+
				"run this where the vendor runs, or set LEAF_NATS_STORE_DIR (or LEAF_NATS_LISTEN, LEAF_NATS_URL, LEAF_POSTGRES_URL) as the vendor has it",
				ErrNoStore, dir, env.Listen)
		}
	}
	lock, err := natsserver.LockStore(dir)
	switch {
	case errors.Is(err, natsserver.ErrStoreInUse):
		url, uerr := natsserver.StoreURL(dir)
		if uerr != nil || url == "" {
			return "", "", stop, fmt.Errorf("%w; set LEAF_NATS_URL to the address of the vendor using it", err)
		}
		return url, "the store " + dir + " of the vendor at " + url, stop, nil
	case err != nil:
		return "", "", stop, err
	}
	srv, err := natsserver.Start(natsserver.Config{Listen: "127.0.0.1:0", StoreDir: dir, Name: "leaf-admin"})
	if err != nil {
		lock.Close()
		return "", "", stop, fmt.Errorf("open the embedded store %s: %w", dir, err)
	}
	return srv.ClientURL(), "the store " + dir, func() { srv.Shutdown(); srv.WaitForShutdown(); lock.Close() }, nil
}

// vendorAt returns the URL of a vendor's embedded server at env.Listen: a
// NATS server there whose JetStream holds a cluster contract; "" when there
// is none.
func vendorAt(env Env) string {
	if env.Listen == "" {
		return ""
	}
	url := "nats://" + env.Listen
	nc, err := nats.Connect(url, append(env.NATSOptions, nats.Name("leaf-admin"), nats.Timeout(time.Second), nats.NoReconnect())...)
	if err != nil {
		return ""
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := js.KeyValue(ctx, envNames(env, nc).Cluster); err != nil {
		return ""
	}
	return url
}

// Close closes the connection and the embedded server it started, if any.
func (a *Admin) Close() {
	if a.nc != nil {
		a.nc.Close()
	}
	a.stopServer()
}

// Contract returns the recorded cluster contract; kv.ErrNoContract when
// none. It creates nothing: a command never records a contract of its own.
func (a *Admin) Contract(ctx context.Context) (*kv.Contracts, kv.Contract, uint64, error) {
	cs, err := kv.FindContracts(ctx, a.js)
	if err != nil {
		return nil, kv.Contract{}, 0, err
	}
	c, rev, err := cs.Get(ctx)
	return cs, c, rev, err
}

// Store opens the segment store of the environment. create allows a KV
// bucket that does not exist yet. The store must be the one the cluster contract names,
// if one is recorded: writing to another would hand out IDs the cluster's
// store also hands out.
func (a *Admin) Store(ctx context.Context, create bool) (segment.AdminStore, string, func(), error) {
	st, closeStore, err := OpenStore(ctx, a.env.PostgresURL, a.env.KVReplicas, a.js, create)
	if err != nil {
		return nil, "", nil, err
	}
	where := "KV bucket " + a.js.Segments + " of " + a.where
	if a.env.StoreKind() == cluster.KindPostgres {
		where = "Postgres"
	}
	_, rec, _, err := a.Contract(ctx)
	if errors.Is(err, kv.ErrNoContract) || err == nil && rec.Segments == "" {
		return st, where, closeStore, nil
	}
	if err != nil {
		closeStore()
		return nil, "", nil, fmt.Errorf("read the cluster contract: %w", err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		closeStore()
		return nil, "", nil, fmt.Errorf("read the identity of the segment store (%s): %w", where, err)
	}
	if name := a.env.StoreKind() + ":" + info.ID; name != rec.Segments {
		closeStore()
		kind, _, _ := strings.Cut(rec.Segments, ":")
		fix := "set LEAF_POSTGRES_URL to the cluster's database"
		if kind == cluster.KindKV {
			fix = "leave LEAF_POSTGRES_URL empty, as the vendors have it"
		}
		return nil, "", nil, fmt.Errorf("this command's segment store (%s, %s) "+
			"is not the cluster's (%s, per the contract in KV bucket %s): %s, or move the cluster's segments first (vendor cluster move-segments)",
			name, where, rec.Segments, a.js.Cluster, fix)
	}
	return st, where, closeStore, nil
}

// OpenTags opens the segment store a vendor of env would use, checked
// against the cluster contract when a NATS is there to read it from. Only
// create makes a store that does not exist yet.
func OpenTags(ctx context.Context, env Env, create bool, hint func(error) string) (segment.AdminStore, string, func(), error) {
	a, err := Open(env, create && env.StoreKind() == cluster.KindKV, hint)
	if errors.Is(err, ErrNoStore) && env.StoreKind() == cluster.KindPostgres {
		// No NATS to read a contract from: no vendor has run here. Say
		// so, since nothing checked that this is the cluster's database.
		st, closeStore, err := OpenStore(ctx, env.PostgresURL, 0, kv.JS{}, false)
		return st, "Postgres (not checked against a cluster contract: LEAF_NATS_URL is unset and " + env.StoreDir +
			" holds no vendor's store; set LEAF_NATS_URL as the vendors have it to check)", closeStore, err
	}
	if err != nil {
		return nil, "", nil, err
	}
	st, where, closeStore, err := a.Store(ctx, create)
	if err != nil {
		a.Close()
		return nil, "", nil, err
	}
	return st, where, func() { closeStore(); a.Close() }, nil
}
