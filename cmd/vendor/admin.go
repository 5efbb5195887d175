package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leaf-nats/leaf/internal/natsserver"
	"github.com/leaf-nats/leaf/kv"
	"github.com/leaf-nats/leaf/segment"
)

// admin is what the tags and cluster commands work on: the NATS a vendor
// with the same settings would use (through the vendor holding the
// embedded store, or the store directory itself when none runs), and the
// segment store.
type admin struct {
	cfg   Config
	nc    *nats.Conn // nil when no NATS is configured or found
	js    jetstream.JetStream
	where string // the NATS, for messages

	stopServer func()
}

// errNoStore is returned when the embedded store directory does not exist
// and the command may not create it.
var errNoStore = errors.New("no store")

// openAdmin connects to the NATS a vendor with cfg would use. For the
// embedded default it goes through the vendor that holds
// LEAF_NATS_STORE_DIR (its lock file names its address) or, when none does,
// opens the directory itself and holds it meanwhile; create allows a
// directory that does not exist yet.
func openAdmin(cfg Config, create bool) (*admin, error) {
	a := &admin{cfg: cfg, stopServer: func() {}}
	natsURL := cfg.NATSURL
	a.where = "NATS at " + redact(natsURL)
	if natsURL == "" {
		dir, err := filepath.Abs(cfg.NATSStoreDir)
		if err != nil {
			return nil, err
		}
		if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) && !create {
			return nil, fmt.Errorf("%w at %s: run this where the vendor runs, or set LEAF_NATS_STORE_DIR (or LEAF_NATS_URL, LEAF_POSTGRES_URL) as the vendor has it", errNoStore, dir)
		}
		lock, err := natsserver.LockStore(dir)
		switch {
		case errors.Is(err, natsserver.ErrStoreInUse):
			url, uerr := natsserver.StoreURL(dir)
			if uerr != nil || url == "" {
				return nil, fmt.Errorf("%w; set LEAF_NATS_URL to the address of the vendor using it", err)
			}
			natsURL, a.where = url, "the store "+dir+" of the vendor at "+url
		case err != nil:
			return nil, err
		default:
			srv, err := natsserver.Start(natsserver.Config{Listen: "127.0.0.1:0", StoreDir: dir, Name: "leaf-admin"})
			if err != nil {
				lock.Close()
				return nil, fmt.Errorf("open the embedded store %s: %w", dir, err)
			}
			natsURL, a.where = srv.ClientURL(), "the store "+dir
			a.stopServer = func() { srv.Shutdown(); srv.WaitForShutdown(); lock.Close() }
		}
	}
	opts, err := cfg.natsOptions()
	if err != nil {
		a.stopServer()
		return nil, err
	}
	if a.nc, err = nats.Connect(natsURL, append(opts, nats.Name("leaf-admin"))...); err != nil {
		a.stopServer()
		return nil, fmt.Errorf("connect to %s: %w%s", a.where, err, connectHint(err))
	}
	if a.js, err = jetstream.New(a.nc); err != nil {
		a.Close()
		return nil, err
	}
	return a, nil
}

// Close closes the connection and the embedded server it started, if any.
func (a *admin) Close() {
	if a.nc != nil {
		a.nc.Close()
	}
	a.stopServer()
}

// contract returns the recorded cluster contract; ErrNoContract when none.
// It creates nothing: a command never records a contract of its own.
func (a *admin) contract(ctx context.Context) (*kv.Contracts, kv.Contract, uint64, error) {
	cs, err := kv.FindContracts(ctx, a.js)
	if err != nil {
		return nil, kv.Contract{}, 0, err
	}
	c, rev, err := cs.Get(ctx)
	return cs, c, rev, err
}

// store opens the segment store of cfg. create allows a KV bucket that
// does not exist yet. The store must be the one the cluster contract names,
// if one is recorded: writing to another would hand out IDs the cluster's
// store also hands out.
func (a *admin) store(ctx context.Context, cfg Config, create bool) (segment.AdminStore, string, func(), error) {
	st, closeStore, err := openStore(ctx, cfg, a.js, create)
	if err != nil {
		return nil, "", nil, err
	}
	where := "KV bucket " + kv.SegmentBucket + " of " + a.where
	if cfg.storeKind() == kindPostgres {
		where = "Postgres"
	}
	_, rec, _, err := a.contract(ctx)
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
	if name := storeName(cfg.storeKind(), info); name != rec.Segments {
		closeStore()
		kind, _, _ := strings.Cut(rec.Segments, ":")
		fix := "set LEAF_POSTGRES_URL to the cluster's database"
		if kind == kindKV {
			fix = "leave LEAF_POSTGRES_URL empty, as the vendors have it"
		}
		return nil, "", nil, fmt.Errorf("this command's segment store (%s, %s) is not the cluster's (%s, per the contract in KV bucket %s): %s, or move the cluster's segments first (vendor cluster move-segments)",
			name, where, rec.Segments, kv.ClusterBucket, fix)
	}
	return st, where, closeStore, nil
}
