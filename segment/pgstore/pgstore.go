// Package pgstore keeps Leaf-segment rows in Postgres, in Leaf's
// leaf_alloc table, through database/sql and github.com/lib/pq. A Store is
// a segment.Store for the allocator, and the admin calls of the `vendor
// tags` commands.
//
// Allocation is Leaf's transaction: SELECT ... FOR UPDATE the row, then
// advance max_id by the step. Concurrent allocators on one tag queue on the
// row lock, so every segment is handed out once.
//
// Open does not connect: a database that is down when the process starts
// is not fatal. Each call reports its own failure, the table is created on
// the first call that reaches the database, and database/sql replaces lost
// connections on the next call.
package pgstore

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/lib/pq"
	"github.com/lib/pq/pqerror"

	"github.com/leaf-nats/leaf/segment"
)

// Pool limits. An allocator makes at most one load per tag at a time and a
// load is one short transaction per segment, so a few connections serve
// thousands of tags; many vendor processes share one Postgres, whose
// max_connections (100 by default) they must not exhaust.
const (
	maxOpenConns = 4
	maxIdleConns = 4 // keep them: a reconnect is slower than a load
	// connMaxLifetime rotates connections so that a failover or a
	// connection pooler's rebalancing reaches them.
	connMaxLifetime = 30 * time.Minute
	connMaxIdleTime = 5 * time.Minute
	// callTimeout bounds every call whose context has no earlier deadline.
	callTimeout = 10 * time.Second
)

const createTable = `CREATE TABLE IF NOT EXISTS leaf_alloc (
	biz_tag     varchar(128) PRIMARY KEY,
	max_id      bigint       NOT NULL DEFAULT 1,
	step        integer      NOT NULL,
	description varchar(256),
	update_time timestamptz  NOT NULL DEFAULT now()
)`

// addStrict marks strict tags beside Leaf's columns, which stay as Leaf has
// them; rows from before it, or from Leaf, are normal.
const addStrict = `ALTER TABLE leaf_alloc ADD COLUMN IF NOT EXISTS strict boolean NOT NULL DEFAULT false`

// addHome keeps a strict tag's home region beside it (” with no regions).
const addHome = `ALTER TABLE leaf_alloc ADD COLUMN IF NOT EXISTS home varchar(32) NOT NULL DEFAULT ''`

// createRetired keeps the max_id of deleted tags, so a tag added again
// continues after every ID it ever handed out instead of starting over.
const createRetired = `CREATE TABLE IF NOT EXISTS leaf_alloc_retired (
	biz_tag    varchar(128) PRIMARY KEY,
	max_id     bigint       NOT NULL,
	retired_at timestamptz  NOT NULL DEFAULT now()
)`

// createStore is the store's identity, one row: which database this is, so
// that vendors told of another one refuse to serve from it, and whether its
// segments were moved to another store (vendor cluster move-segments).
const createStore = `CREATE TABLE IF NOT EXISTS leaf_store (
	one      boolean      PRIMARY KEY DEFAULT true CHECK (one),
	id       varchar(64)  NOT NULL,
	created  timestamptz  NOT NULL DEFAULT now(),
	moved_to varchar(256),
	moved_at timestamptz
)`

// createLock is the advisory lock key that serialises table creation:
// concurrent CREATE TABLE IF NOT EXISTS can fail on Postgres's catalog.
const createLock = 0x6c656166 // "leaf"

// ErrRefused is wrapped when Postgres refuses this client for a reason
// waiting cannot fix: a wrong user or password, a database that does not
// exist. It wraps segment.ErrRefused.
var ErrRefused = fmt.Errorf("pgstore: Postgres refused the connection (%w)", segment.ErrRefused)

// Store is a segment store in Postgres.
type Store struct {
	db   *sql.DB
	addr string // host:port, for messages

	mu    sync.Mutex // serialises table creation
	ready bool       // the table exists
}

var (
	_ segment.Store = (*Store)(nil)
)

// CheckURL reports whether dsn is a Postgres URL or key=value string the
// store can use.
func CheckURL(dsn string) error {
	if _, err := pq.NewConfig(dsn); err != nil {
		return fmt.Errorf("%v (want postgres://user:password@host:5432/database?sslmode=disable)", err)
	}
	return nil
}

// Open returns a store for the database at dsn (a postgres:// URL or
// key=value string). It fails only on a malformed dsn; see the package doc.
func Open(dsn string) (*Store, error) {
	cfg, err := pq.NewConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("pgstore: Postgres URL: %w", err)
	}
	addr := net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
	// One round trip per parameterised query instead of two (lib/pq
	// otherwise prepares first): an allocation is then four round trips,
	// which is what a segment load costs on a distant database.
	cfg.BinaryParameters = true
	conn, err := pq.NewConnectorConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("pgstore: Postgres URL: %w", err)
	}
	db := sql.OpenDB(conn)
	db.SetMaxOpenConns(maxOpenConns)
	db.SetMaxIdleConns(maxIdleConns)
	db.SetConnMaxLifetime(connMaxLifetime)
	db.SetConnMaxIdleTime(connMaxIdleTime)
	return &Store{db: db, addr: addr}, nil
}

// Close closes the connections.
func (s *Store) Close() error { return s.db.Close() }

// Ping reaches the database and creates the table when missing; use it to
// report a bad URL or a down database at start.
func (s *Store) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	return s.ensure(ctx)
}

// ensure creates the tables and the store's identity once.
func (s *Store) ensure(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ready {
		return nil
	}
	id, err := newStoreID()
	if err != nil {
		return err
	}
	err = s.tx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, createLock); err != nil {
			return err
		}
		for _, q := range []string{createTable, addStrict, addHome, createRetired, createStore} {
			if _, err := tx.ExecContext(ctx, q); err != nil {
				return err
			}
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO leaf_store (id) VALUES ($1) ON CONFLICT (one) DO NOTHING`, id)
		return err
	})
	if err != nil {
		return s.describe("create tables leaf_alloc, leaf_alloc_retired and leaf_store", err)
	}
	s.ready = true
	return nil
}

// describe says what to check when the first call to the database fails:
// most often it cannot be reached, or refuses the credentials.
func (s *Store) describe(what string, err error) error {
	var pqErr *pq.Error
	var opErr *net.OpError
	switch {
	case errors.As(err, &pqErr) && (pqErr.Code == pqerror.InvalidPassword ||
		pqErr.Code == pqerror.InvalidAuthorizationSpecification || pqErr.Code == pqerror.InvalidCatalogName):
		return fmt.Errorf("%w at %s: %s (check the user, password and database in LEAF_POSTGRES_URL)", ErrRefused, s.addr, pqErr.Message)
	case errors.As(err, &opErr):
		return fmt.Errorf("pgstore: cannot reach Postgres at %s: %w (is it running, and is the host in LEAF_POSTGRES_URL right?)", s.addr, err)
	}
	return fmt.Errorf("pgstore: %s: %w", what, err)
}

// newStoreID returns a random store identity.
func newStoreID() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("pgstore: store identity: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// begin bounds a call's time and makes sure the table exists.
func (s *Store) begin(ctx context.Context) (context.Context, context.CancelFunc, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	if err := s.ensure(ctx); err != nil {
		cancel()
		return nil, nil, err
	}
	return ctx, cancel, nil
}

// tx runs f in a transaction, committing when it returns nil. A
// transaction Postgres aborted for a deadlock or a serialization failure
// (an allocation and a seal locking the store's row and a tag's in
// opposite orders) changed nothing: it is run again, a few times.
func (s *Store) tx(ctx context.Context, f func(*sql.Tx) error) error {
	for try := 1; ; try++ {
		err := s.tx1(ctx, f)
		if pe := (*pq.Error)(nil); try < txTries && errors.As(err, &pe) && (pe.Code == "40P01" || pe.Code == "40001") {
			continue
		}
		return err
	}
}

// txTries is how many times tx runs a transaction Postgres aborted.
const txTries = 5

func (s *Store) tx1(ctx context.Context, f func(*sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := f(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// Alloc advances tag's max_id by step (the row's step when 0) and returns
// the row after the update. floor runs while the row is locked FOR UPDATE:
// no other allocation of the tag can commit meanwhile.
func (s *Store) Alloc(ctx context.Context, tag string, step int64, floor segment.Floor) (segment.Row, error) {
	ctx, cancel, err := s.begin(ctx)
	if err != nil {
		return segment.Row{}, err
	}
	defer cancel()
	r := segment.Row{Tag: tag}
	err = s.tx(ctx, func(tx *sql.Tx) error {
		// The store's row is read FOR SHARE: Seal's update of it waits for
		// every allocation in progress, and allocations after it see that
		// the segments moved.
		var maxID, rowStep int64
		var movedTo sql.NullString
		err := tx.QueryRowContext(ctx,
			`SELECT a.max_id, a.step, s.moved_to FROM leaf_alloc a, leaf_store s WHERE a.biz_tag = $1 FOR UPDATE OF a FOR SHARE OF s`,
			tag).Scan(&maxID, &rowStep, &movedTo)
		if errors.Is(err, sql.ErrNoRows) {
			return &segment.TagError{Tag: tag, Err: segment.ErrUnknownTag}
		}
		if err != nil {
			return err
		}
		if movedTo.Valid {
			return fmt.Errorf("%w: to %s", segment.ErrStoreMoved, movedTo.String)
		}
		if step == 0 {
			step = rowStep
		}
		base, end, err := checkFloor(floor, maxID, step)
		if err != nil {
			return err
		}
		if step = segment.Grant(base, step, end); step == 0 {
			return &segment.TagError{Tag: tag, Err: segment.ErrExhausted}
		}
		r.Allocated = step
		return tx.QueryRowContext(ctx,
			`UPDATE leaf_alloc SET max_id = $2, update_time = now() WHERE biz_tag = $1
			 RETURNING max_id, step, coalesce(description, ''), update_time, strict, home`, tag, base+step,
		).Scan(&r.MaxID, &r.Step, &r.Description, &r.Updated, &r.Strict, &r.Home)
	})
	if err != nil {
		return segment.Row{}, fmt.Errorf("pgstore: alloc %q: %w", tag, err)
	}
	return r, nil
}

// Return sets tag's max_id back to to if it is from (segment.Returner):
// IDs a vendor held unused at the top, given back at a clean stop. A strict
// tag's row, and the rows of a store whose segments moved, are never set
// back.
func (s *Store) Return(ctx context.Context, tag string, from, to int64) (bool, error) {
	if to < 0 || to > from {
		return false, nil
	}
	n, err := s.exec(ctx, `UPDATE leaf_alloc SET max_id = $3, update_time = now()
		WHERE biz_tag = $1 AND max_id = $2 AND NOT strict AND NOT EXISTS (SELECT 1 FROM leaf_store WHERE moved_to IS NOT NULL)`, tag, from, to)
	if err != nil {
		return false, fmt.Errorf("pgstore: give back IDs of %q: %w", tag, err)
	}
	return n == 1, nil
}

var _ segment.Returner = (*Store)(nil)

// checkFloor runs floor (nil: none) on maxID and step and checks what it
// returns.
func checkFloor(floor segment.Floor, maxID, step int64) (base, end int64, err error) {
	if floor == nil {
		return maxID, segment.Whole.End, nil
	}
	base, end, err = floor(maxID, step)
	if err == nil && base < maxID {
		err = fmt.Errorf("the floor of max_id %d is %d, below it (a bug)", maxID, base)
	}
	return base, end, err
}

// Tags lists every tag, ordered, with its mode.
func (s *Store) Tags(ctx context.Context) ([]segment.Row, error) {
	var tags []segment.Row
	err := s.query(ctx, `SELECT biz_tag, strict, home FROM leaf_alloc ORDER BY biz_tag`, func(rows *sql.Rows) error {
		var r segment.Row
		err := rows.Scan(&r.Tag, &r.Strict, &r.Home)
		tags = append(tags, r)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: list tags: %w", err)
	}
	return tags, nil
}

// Tag reads tag's row by its primary key.
func (s *Store) Tag(ctx context.Context, tag string) (segment.Row, error) {
	r := segment.Row{Tag: tag}
	found := false
	err := s.query(ctx, `SELECT strict, home FROM leaf_alloc WHERE biz_tag = $1`, func(rows *sql.Rows) error {
		found = true
		return rows.Scan(&r.Strict, &r.Home)
	}, tag)
	if err != nil {
		return segment.Row{}, fmt.Errorf("pgstore: read tag %q: %w", tag, err)
	}
	if !found {
		return segment.Row{}, &segment.TagError{Tag: tag, Err: segment.ErrUnknownTag}
	}
	return r, nil
}

// List returns every row, ordered by tag.
func (s *Store) List(ctx context.Context) ([]segment.Row, error) {
	var list []segment.Row
	err := s.query(ctx, `SELECT biz_tag, max_id, step, coalesce(description, ''), update_time, strict, home
		FROM leaf_alloc ORDER BY biz_tag`, func(rows *sql.Rows) error {
		var r segment.Row
		err := rows.Scan(&r.Tag, &r.MaxID, &r.Step, &r.Description, &r.Updated, &r.Strict, &r.Home)
		list = append(list, r)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: list rows: %w", err)
	}
	return list, nil
}

// query runs a query and calls scan for every row.
func (s *Store) query(ctx context.Context, query string, scan func(*sql.Rows) error, args ...any) error {
	ctx, cancel, err := s.begin(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// Create adds r; a MaxID of 0 starts the tag at 1. A tag deleted before
// continues after the last ID it handed out if that is above r.MaxID. A
// store whose segments were moved takes no new tag.
func (s *Store) Create(ctx context.Context, r segment.Row) error {
	if err := segment.ValidateRow(r); err != nil {
		return err
	}
	n, err := s.exec(ctx, `INSERT INTO leaf_alloc (biz_tag, max_id, step, description, strict, home)
		SELECT $1::varchar, greatest($2::bigint, coalesce((SELECT max_id FROM leaf_alloc_retired WHERE biz_tag = $1::varchar), 0)), $3::integer, nullif($4::varchar, ''), $5::boolean, $6::varchar
		FROM leaf_store WHERE moved_to IS NULL FOR SHARE`,
		r.Tag, max(r.MaxID, 1), r.Step, r.Description, r.Strict, r.Home)
	var pqErr *pq.Error
	if errors.As(err, &pqErr) && pqErr.Code == pqerror.UniqueViolation {
		return &segment.TagError{Tag: r.Tag, Err: segment.ErrTagExists}
	}
	if err != nil {
		return fmt.Errorf("pgstore: create %q: %w", r.Tag, err)
	}
	if n == 0 {
		info, err := s.Info(ctx)
		if err != nil {
			return fmt.Errorf("pgstore: create %q: %w", r.Tag, err)
		}
		return fmt.Errorf("pgstore: create %q: %w: to %s", r.Tag, segment.ErrStoreMoved, info.MovedTo)
	}
	return nil
}

// SetStep changes tag's step.
func (s *Store) SetStep(ctx context.Context, tag string, step int64) error {
	if err := segment.ValidateStep(step); err != nil {
		return err
	}
	return s.change(ctx, tag, "set step", `UPDATE leaf_alloc SET step = $2, update_time = now() WHERE biz_tag = $1`, tag, step)
}

// SetStrict makes tag strict, or normal again.
func (s *Store) SetStrict(ctx context.Context, tag string, strict bool, home string) error {
	if !strict {
		home = ""
	}
	return s.change(ctx, tag, "set mode", `UPDATE leaf_alloc SET strict = $2, home = $3, update_time = now() WHERE biz_tag = $1`, tag, strict, home)
}

// Delete removes tag's row, keeping its max_id in leaf_alloc_retired.
func (s *Store) Delete(ctx context.Context, tag string) error {
	return s.change(ctx, tag, "delete", `WITH gone AS (DELETE FROM leaf_alloc WHERE biz_tag = $1 RETURNING biz_tag, max_id)
		INSERT INTO leaf_alloc_retired (biz_tag, max_id) SELECT biz_tag, max_id FROM gone
		ON CONFLICT (biz_tag) DO UPDATE SET max_id = greatest(leaf_alloc_retired.max_id, excluded.max_id), retired_at = now()`, tag)
}

// change runs a statement on tag's row, ErrUnknownTag when there is none.
func (s *Store) change(ctx context.Context, tag, what, query string, args ...any) error {
	n, err := s.exec(ctx, query, args...)
	if err != nil {
		return fmt.Errorf("pgstore: %s %q: %w", what, tag, err)
	}
	if n == 0 {
		return &segment.TagError{Tag: tag, Err: segment.ErrUnknownTag}
	}
	return nil
}

// exec runs a statement and returns the number of rows it changed.
func (s *Store) exec(ctx context.Context, query string, args ...any) (int64, error) {
	ctx, cancel, err := s.begin(ctx)
	if err != nil {
		return 0, err
	}
	defer cancel()
	res, err := s.db.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// Info returns the store's identity, and where its segments moved if they
// did.
func (s *Store) Info(ctx context.Context) (segment.StoreInfo, error) {
	ctx, cancel, err := s.begin(ctx)
	if err != nil {
		return segment.StoreInfo{}, err
	}
	defer cancel()
	var i segment.StoreInfo
	var movedAt sql.NullTime
	var system, database, table string
	// The row's id is copied with the data (pg_dump, CREATE DATABASE ...
	// TEMPLATE); the system identifier (shared by a primary and its
	// physical standbys, new for every initdb), the database's and the
	// table's OIDs are not, so a copy has an identity of its own.
	err = s.db.QueryRowContext(ctx, `SELECT id, created, coalesce(moved_to, ''), moved_at,
		(SELECT system_identifier FROM pg_control_system())::text,
		(SELECT oid FROM pg_database WHERE datname = current_database())::text,
		'leaf_store'::regclass::oid::text
		FROM leaf_store`).
		Scan(&i.ID, &i.Created, &i.MovedTo, &movedAt, &system, &database, &table)
	if err != nil {
		return segment.StoreInfo{}, fmt.Errorf("pgstore: read table leaf_store: %w", err)
	}
	i.ID += "@" + system + "." + database + "." + table
	i.MovedAt = movedAt.Time
	return i, nil
}

// Seal marks the store's segments moved to the store named to, and returns
// every row, live and retired, as they are then: no allocation after it
// succeeds, and every allocation before it is in the rows. Sealing again
// for the same store is allowed (a move that resumes); for another, not.
func (s *Store) Seal(ctx context.Context, to string) ([]segment.Row, error) {
	ctx, cancel, err := s.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()
	var rows []segment.Row
	err = s.tx(ctx, func(tx *sql.Tx) error {
		// The update waits for allocations holding the store's row FOR
		// SHARE; later ones wait for this transaction, then see moved_to.
		var was sql.NullString
		if err := tx.QueryRowContext(ctx, `SELECT moved_to FROM leaf_store FOR UPDATE`).Scan(&was); err != nil {
			return err
		}
		if was.Valid && was.String != to {
			return fmt.Errorf("%w: already to %s", segment.ErrStoreMoved, was.String)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE leaf_store SET moved_to = $1, moved_at = coalesce(moved_at, now())`, to); err != nil {
			return err
		}
		live, err := tx.QueryContext(ctx, `SELECT biz_tag, max_id, step, coalesce(description, ''), update_time, strict, home FROM leaf_alloc ORDER BY biz_tag`)
		if err != nil {
			return err
		}
		defer live.Close()
		for live.Next() {
			var r segment.Row
			if err := live.Scan(&r.Tag, &r.MaxID, &r.Step, &r.Description, &r.Updated, &r.Strict, &r.Home); err != nil {
				return err
			}
			rows = append(rows, r)
		}
		if err := live.Err(); err != nil {
			return err
		}
		retired, err := tx.QueryContext(ctx, `SELECT biz_tag, max_id, retired_at FROM leaf_alloc_retired ORDER BY biz_tag`)
		if err != nil {
			return err
		}
		defer retired.Close()
		for retired.Next() {
			r := segment.Row{Retired: true}
			if err := retired.Scan(&r.Tag, &r.MaxID, &r.Updated); err != nil {
				return err
			}
			rows = append(rows, r)
		}
		return retired.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: seal: %w", err)
	}
	return rows, nil
}

// Unseal makes a store whose segments were moved away serve again: for a
// move back to it, after Raise has carried every row over.
func (s *Store) Unseal(ctx context.Context) error {
	if _, err := s.exec(ctx, `UPDATE leaf_store SET moved_to = NULL, moved_at = NULL`); err != nil {
		return fmt.Errorf("pgstore: unseal: %w", err)
	}
	return nil
}

// Raise makes every ID the store hands out for r.Tag from now on at least
// r.MaxID: it creates a live row (with r's step, description and mode) or raises
// the one there; for a retired r it raises the kept max_id of a deleted tag
// and, if the tag is live here, its row. It never lowers a max_id, so
// running it twice changes nothing.
func (s *Store) Raise(ctx context.Context, r segment.Row) error {
	if err := segment.ValidateTag(r.Tag); err != nil {
		return err
	}
	if !r.Retired {
		if err := segment.ValidateRow(r); err != nil {
			return err
		}
	}
	ctx, cancel, err := s.begin(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	err = s.tx(ctx, func(tx *sql.Tx) error {
		if r.Retired {
			if _, err := tx.ExecContext(ctx, `INSERT INTO leaf_alloc_retired (biz_tag, max_id) VALUES ($1, $2)
				ON CONFLICT (biz_tag) DO UPDATE SET max_id = greatest(leaf_alloc_retired.max_id, excluded.max_id)`, r.Tag, r.MaxID); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, `UPDATE leaf_alloc SET max_id = $2, update_time = now() WHERE biz_tag = $1 AND max_id < $2`, r.Tag, r.MaxID)
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO leaf_alloc (biz_tag, max_id, step, description, strict, home)
			VALUES ($1::varchar, greatest($2::bigint, coalesce((SELECT max_id FROM leaf_alloc_retired WHERE biz_tag = $1::varchar), 0), 1), $3::integer, nullif($4::varchar, ''), $5::boolean, $6::varchar)
			ON CONFLICT (biz_tag) DO UPDATE SET max_id = excluded.max_id, update_time = now() WHERE leaf_alloc.max_id < excluded.max_id`,
			r.Tag, r.MaxID, r.Step, r.Description, r.Strict, r.Home)
		return err
	})
	if err != nil {
		return fmt.Errorf("pgstore: raise %q to %d: %w", r.Tag, r.MaxID, err)
	}
	return nil
}
