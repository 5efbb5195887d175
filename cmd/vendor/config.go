package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/kelseyhightower/envconfig"
	"github.com/nats-io/nats.go"

	"github.com/leaf-nats/leaf/admin"
	"github.com/leaf-nats/leaf/cluster"
	"github.com/leaf-nats/leaf/kv"
	"github.com/leaf-nats/leaf/segment"
	"github.com/leaf-nats/leaf/segment/pgstore"
	"github.com/leaf-nats/leaf/snowflake"
	"github.com/leaf-nats/leaf/vending"
	"github.com/leaf-nats/leaf/workerid"
)

// Config is the vendor's configuration, read from LEAF_* variables. Every
// default works on a laptop: embedded NATS, segments in JetStream KV.
type Config struct {
	NATSURL      string `envconfig:"NATS_URL" desc:"NATS server URL(s), comma-separated; empty starts an embedded server with JetStream"`
	NATSListen   string `envconfig:"NATS_LISTEN" default:"127.0.0.1:4222" desc:"embedded server's client address (host:port); it has no authentication: beyond loopback the vendor warns at start"`
	NATSStoreDir string `envconfig:"NATS_STORE_DIR" default:"leaf-data" desc:"embedded server's JetStream storage; survives restarts (how far each segment tag was handed out is also kept beside it, in <dir>.record)"`
	NATSCreds    string `envconfig:"NATS_CREDS" desc:"credentials file (JWT + nkey seed) for LEAF_NATS_URL"`
	NATSNKey     string `envconfig:"NATS_NKEY" desc:"nkey seed file for LEAF_NATS_URL"`
	NATSUser     string `envconfig:"NATS_USER" desc:"user name (or put user:password in the URL)"`
	NATSPassword string `envconfig:"NATS_PASSWORD" desc:"password for LEAF_NATS_USER"`
	NATSToken    string `envconfig:"NATS_TOKEN" desc:"authentication token"`
	NATSTLSCA    string `envconfig:"NATS_TLS_CA" desc:"CA certificate file to verify the server"`
	NATSTLSCert  string `envconfig:"NATS_TLS_CERT" desc:"client certificate file (with LEAF_NATS_TLS_KEY)"`
	NATSTLSKey   string `envconfig:"NATS_TLS_KEY" desc:"client private key file"`

	PostgresURL      string  `envconfig:"POSTGRES_URL" desc:"Postgres DSN for segments; empty keeps segments in JetStream KV"`
	SegmentMaxStep   int64   `envconfig:"SEGMENT_MAX_STEP" default:"1000000" desc:"cap of the dynamic segment step (Leaf's 1,000,000)"`
	SegmentGiveBack  bool    `envconfig:"SEGMENT_GIVE_BACK" default:"true" desc:"at a clean stop, give the unused IDs at the top of each tag back to the store, so that a restart skips none (when no other vendor allocated after them)"`
	SegmentRateLimit float64 `envconfig:"SEGMENT_RATE_LIMIT" default:"1e9" desc:"most IDs a second one vendor hands out of one segment tag (0: no limit); beyond it requests get 429, so no requester can use a tag's ID space up"`
	SegmentRateBurst float64 `envconfig:"SEGMENT_RATE_BURST" default:"0" desc:"most IDs of one segment tag one vendor hands out at once within LEAF_SEGMENT_RATE_LIMIT (0: one second of the limit); a larger request gets 429 saying so"`

	RequesterRateLimit float64 `envconfig:"REQUESTER_RATE_LIMIT" default:"0" desc:"most IDs a second one vendor hands one requester, both modes (0: no limit); a requester is the account/user NATS names in Nats-Request-Info (service imports with share: true), else the reply inbox"`
	RequesterRateBurst int     `envconfig:"REQUESTER_RATE_BURST" default:"0" desc:"most IDs one requester is handed at once within LEAF_REQUESTER_RATE_LIMIT (0: one second of the limit)"`

	SubjectPrefix string `envconfig:"SUBJECT_PREFIX" default:"leaf" desc:"subject prefix: <prefix>.snowflake, <prefix>.segment.<tag>"`
	QueueGroup    string `envconfig:"QUEUE_GROUP" default:"leaf" desc:"queue group the workers share"`
	MaxBatch      int    `envconfig:"MAX_BATCH" default:"10000" desc:"largest count one request may ask for (text and binary replies; snowflake in any encoding)"`
	MaxRangeBatch int    `envconfig:"MAX_RANGE_BATCH" default:"1000000000" desc:"largest count of segment IDs one request may ask for in the ranges encoding"`
	ReplyPrefixes string `envconfig:"REPLY_PREFIXES" default:"_INBOX.,_R_." desc:"reply subjects answered, comma-separated prefixes: inboxes (add a client's nats.CustomInboxPrefix); a request with another reply subject is dropped"`

	WorkerID       string        `envconfig:"WORKER_ID" desc:"static worker ID 0..1023, 0..15 with LEAF_SNOWFLAKE_LAYOUT=js53 (Leaf's local mode); unset claims one from KV"`
	WorkerIDRange  string        `envconfig:"WORKER_ID_RANGE" desc:"worker IDs this cluster may claim, first-last (disjoint ranges for clusters, or a Leaf deployment, serving the same consumers); unset: all of the layout's, 0-1023 (js53: 0-15)"`
	WorkerFile     string        `envconfig:"WORKER_FILE" desc:"with LEAF_WORKER_ID: file keeping its last timestamp (default <store dir>/worker-<id>.last)"`
	WorkerLeaseTTL time.Duration `envconfig:"WORKER_LEASE_TTL" default:"30s" desc:"worker-ID lease TTL; renewed every third of it"`
	KVReplicas     int           `envconfig:"KV_REPLICAS" default:"1" desc:"replicas of the KV buckets when this vendor creates them"`
	Epoch          int64         `envconfig:"EPOCH" default:"1288834974657" desc:"snowflake epoch, Unix ms"`
	Layout         string        `envconfig:"SNOWFLAKE_LAYOUT" default:"1+41+10+12" desc:"snowflake bit layout: 1+41+10+12 (also named default) or js53 (11+41+4+8: IDs below 2^53, exact in a JavaScript number; 16 worker IDs, 256 IDs per ms each); part of the cluster contract"`
	ClockTolerance time.Duration `envconfig:"CLOCK_TOLERANCE" default:"5ms" desc:"backwards clock step that is waited out; larger ones answer 503"`
	ClockMaxSkew   time.Duration `envconfig:"CLOCK_MAX_SKEW" default:"1s" desc:"a vendor whose clock is further from the NATS server's and its live peers' claims no worker ID"`
	Region         string        `envconfig:"REGION" desc:"this vendor's region (1 to 32 letters, digits, '_', '-'), with LEAF_REGION_ID: a NATS cluster with its own state; empty: one region"`
	RegionID       string        `envconfig:"REGION_ID" desc:"this region's number, 0-7 (js53: 0-3), in every ID: its worker IDs are a block of 128 (js53: 4) and its segment IDs start at <id>*2^60, so regions never repeat an ID"`
	StrictLeaseTTL time.Duration `envconfig:"STRICT_LEASE_TTL" default:"5s" desc:"lease TTL of a strict tag's leader: how long its tag waits for a new leader when the leader dies"`

	HTTPAddr     string `envconfig:"HTTP_ADDR" default:"127.0.0.1:9464" desc:"/metrics, /healthz, /readyz and the status page; empty disables"`
	HTTPMaxConns int    `envconfig:"HTTP_MAX_CONNS" default:"1024" desc:"most connections the HTTP server holds; past it a new one closes the oldest idle one; 16 more serve /healthz and /readyz"`
	LogFormat    string `envconfig:"LOG_FORMAT" default:"text" desc:"log format: text or json"`
	LogLevel     string `envconfig:"LOG_LEVEL" default:"info" desc:"log level: debug, info, warn or error"`

	// Coming from Leaf: docs/migrating-from-leaf.md.
	HTTPLeafAPI bool `envconfig:"HTTP_LEAF_API" default:"false" desc:"also serve Leaf's HTTP API on LEAF_HTTP_ADDR: /api/segment/get/<tag>, /api/snowflake/get/<key> (docs/migrating-from-leaf.md)"`
}

const envPrefix = "LEAF"

func loadConfig() (Config, error) {
	var c Config
	if err := envconfig.Process(envPrefix, &c); err != nil {
		var pe *envconfig.ParseError
		if errors.As(err, &pe) {
			return c, fmt.Errorf("%s %q: want %s", pe.KeyName, pe.Value, kindOf(pe.TypeName))
		}
		return c, fmt.Errorf("configuration: %w", err)
	}
	return c, c.validate()
}

// kindOf says in words what a variable of a Go type takes.
func kindOf(typeName string) string {
	switch typeName {
	case "Duration", "time.Duration":
		return "a duration such as 30s or 5ms"
	case "int", "int64":
		return "a whole number"
	case "float64":
		return "a number such as 1e9"
	case "bool":
		return "true or false"
	}
	return "a " + typeName
}

// validate checks everything that can be checked before connecting.
func (c Config) validate() error {
	var errs []error
	bad := func(cond bool, format string, a ...any) {
		if cond {
			errs = append(errs, fmt.Errorf(format, a...))
		}
	}
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	_, lerr := c.layout()
	add(lerr)
	_, _, regErr := c.region()
	add(regErr)
	ids, rerr := c.workerIDRange()
	add(rerr)
	id, err := c.staticWorkerID()
	add(err)
	bad(err == nil && rerr == nil && id >= 0 && !ids.Contains(id), "LEAF_WORKER_ID %d is outside LEAF_WORKER_ID_RANGE %s: pin an ID of the range", id, ids)
	bad(c.ClockMaxSkew < 0 || c.ClockMaxSkew > time.Minute, "LEAF_CLOCK_MAX_SKEW %v: want 0..1m (0: no check)", c.ClockMaxSkew)
	bad(c.WorkerLeaseTTL < time.Second, "LEAF_WORKER_LEASE_TTL %v: want at least 1s", c.WorkerLeaseTTL)
	bad(c.StrictLeaseTTL < time.Second || c.StrictLeaseTTL > 5*time.Minute, "LEAF_STRICT_LEASE_TTL %v: want 1s..5m", c.StrictLeaseTTL)
	bad(c.Epoch <= 0 || c.Epoch > time.Now().UnixMilli(), "LEAF_EPOCH %d: want Unix milliseconds after 1970 and in the past, such as %d (the default, Leaf's)", c.Epoch, snowflake.DefaultEpoch)
	bad(c.ClockTolerance < 0 || c.ClockTolerance > time.Second, "LEAF_CLOCK_TOLERANCE %v: want 0..1s", c.ClockTolerance)
	bad(c.MaxBatch < 1 || c.MaxBatch > 1_000_000, "LEAF_MAX_BATCH %d: want 1..1000000", c.MaxBatch)
	bad(c.MaxRangeBatch < c.MaxBatch || c.MaxRangeBatch > 1<<40, "LEAF_MAX_RANGE_BATCH %d: want LEAF_MAX_BATCH (%d) to 2^40", c.MaxRangeBatch, c.MaxBatch)
	bad(c.SegmentRateLimit < 0 || c.SegmentRateLimit > 1e15, "LEAF_SEGMENT_RATE_LIMIT %g: want 0 (no limit) to 1e15 IDs a second", c.SegmentRateLimit)
	bad(c.SegmentRateBurst < 0 || c.SegmentRateBurst > 1e15, "LEAF_SEGMENT_RATE_BURST %g: want 0 (one second of LEAF_SEGMENT_RATE_LIMIT) to 1e15 IDs", c.SegmentRateBurst)
	bad(c.RequesterRateLimit < 0 || c.RequesterRateLimit > 1e15, "LEAF_REQUESTER_RATE_LIMIT %g: want 0 (no limit) to 1e15 IDs a second", c.RequesterRateLimit)
	bad(c.RequesterRateBurst < 0 || c.RequesterRateBurst > 0 && c.RequesterRateLimit == 0,
		"LEAF_REQUESTER_RATE_BURST %d: want 0 (one second of LEAF_REQUESTER_RATE_LIMIT) or more, with LEAF_REQUESTER_RATE_LIMIT set", c.RequesterRateBurst)
	bad(c.SegmentRateBurst > 0 && c.SegmentRateLimit == 0, "LEAF_SEGMENT_RATE_BURST %g without LEAF_SEGMENT_RATE_LIMIT: a burst bounds nothing without a rate; set both, or neither", c.SegmentRateBurst)
	bad(c.SegmentMaxStep < 1, "LEAF_SEGMENT_MAX_STEP %d: want at least 1", c.SegmentMaxStep)
	bad(c.KVReplicas < 1 || c.KVReplicas > 5, "LEAF_KV_REPLICAS %d: want 1..5", c.KVReplicas)
	bad(c.HTTPMaxConns < 1, "LEAF_HTTP_MAX_CONNS %d: want at least 1", c.HTTPMaxConns)
	bad(c.HTTPLeafAPI && c.HTTPAddr == "", "LEAF_HTTP_LEAF_API=true serves Leaf's API on LEAF_HTTP_ADDR, which is empty: set LEAF_HTTP_ADDR (such as 10.0.0.5:8080, an address your proxy reaches)")
	bad(c.LogFormat != "text" && c.LogFormat != "json", "LEAF_LOG_FORMAT %q: want text or json", c.LogFormat)
	var lvl slog.Level
	bad(lvl.UnmarshalText([]byte(c.LogLevel)) != nil, "LEAF_LOG_LEVEL %q: want debug, info, warn or error", c.LogLevel)
	errs = append(errs, c.validateNATS()...)
	return errors.Join(errs...)
}

// validateNATS checks the settings of NATS and the stores.
func (c Config) validateNATS() []error {
	var errs []error
	if _, _, err := net.SplitHostPort(c.NATSListen); c.NATSURL == "" && err != nil {
		errs = append(errs, fmt.Errorf("LEAF_NATS_LISTEN %q: want host:port", c.NATSListen))
	}
	if (c.NATSTLSCert == "") != (c.NATSTLSKey == "") {
		errs = append(errs, errors.New("LEAF_NATS_TLS_CERT and LEAF_NATS_TLS_KEY go together"))
	}
	if err := vending.ValidatePrefix(c.SubjectPrefix); err != nil {
		errs = append(errs, fmt.Errorf("LEAF_SUBJECT_PREFIX: %w (unset it for the default, leaf)", err))
	}
	for _, p := range c.replyPrefixes() {
		if err := vending.CheckReplyPrefix(p, c.SubjectPrefix); err != nil {
			errs = append(errs, fmt.Errorf("LEAF_REPLY_PREFIXES: %w", err))
		}
	}
	if c.PostgresURL != "" {
		if err := pgstore.CheckURL(c.PostgresURL); err != nil {
			errs = append(errs, fmt.Errorf("LEAF_POSTGRES_URL: %w", err))
		}
	}
	return errs
}

// replyPrefixes splits LEAF_REPLY_PREFIXES.
func (c Config) replyPrefixes() []string {
	var out []string
	for _, p := range strings.Split(c.ReplyPrefixes, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// terms are what this vendor vends by, as the cluster contract records
// them (the segment store is filled in once it answers).
func (c Config) terms() cluster.Terms {
	l, _ := c.layout() // checked by validate
	t := cluster.Terms{Epoch: c.Epoch, Layout: l.String(), WorkerIDs: c.workerIDs()}
	if r, ok, _ := c.region(); ok {
		t.Region = r.String()
	}
	return t
}

// region is a vendor's region (LEAF_REGION, LEAF_REGION_ID).
type region struct {
	Name string
	ID   int
}

func (r region) String() string { return r.Name + "/" + strconv.Itoa(r.ID) }

// region returns the vendor's region; ok is false when it has none.
func (c Config) region() (r region, ok bool, err error) {
	if c.Region == "" && c.RegionID == "" {
		return region{}, false, nil
	}
	l, _ := c.layout()
	id, perr := strconv.Atoi(strings.TrimSpace(c.RegionID))
	switch {
	case c.Region == "" || c.RegionID == "":
		return region{}, false, fmt.Errorf("LEAF_REGION %q and LEAF_REGION_ID %q: set both (a region's name and number) or neither", c.Region, c.RegionID)
	case !regionName.MatchString(c.Region):
		return region{}, false, fmt.Errorf("LEAF_REGION %q: want 1 to 32 letters, digits, '_' and '-', such as eu-west", c.Region)
	case perr != nil || id < 0 || id > min(l.MaxRegionID(), segment.MaxRegionID):
		return region{}, false, fmt.Errorf("LEAF_REGION_ID %q: want 0..%d (LEAF_SNOWFLAKE_LAYOUT=%s has %d regions), a number no other region has",
			c.RegionID, min(l.MaxRegionID(), segment.MaxRegionID), l.Name(), min(l.MaxRegionID(), segment.MaxRegionID)+1)
	}
	return region{Name: c.Region, ID: id}, true, nil
}

// vendingRegion is the region the service names in decoded IDs.
func (c Config) vendingRegion() vending.Region {
	r, _, _ := c.region()
	return vending.Region{Name: r.Name, ID: r.ID}
}

// kvNames are the buckets this vendor keeps its state in: its region's,
// placed in cluster (the NATS cluster it is connected to), or the plain
// ones with no region.
func (c Config) kvNames(cluster string) kv.Names {
	if r, ok, _ := c.region(); ok {
		return kv.RegionNames(r.Name, cluster)
	}
	return kv.PlainNames()
}

// regionName is what LEAF_REGION takes: it names buckets and metric labels.
var regionName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,32}$`)

// block returns the segment IDs this vendor hands out: its region's block,
// or every positive ID with no region.
func (c Config) block() segment.Block {
	if r, ok, _ := c.region(); ok {
		b, _ := segment.RegionBlock(r.ID) // checked by region
		return b
	}
	return segment.Whole
}

// layout parses LEAF_SNOWFLAKE_LAYOUT.
func (c Config) layout() (snowflake.Layout, error) {
	l, err := snowflake.ParseLayout(c.Layout)
	if err != nil {
		return l, fmt.Errorf("LEAF_SNOWFLAKE_LAYOUT %q: want 1+41+10+12 (or default) or js53 (11+41+4+8, IDs below 2^53)", c.Layout)
	}
	return l, nil
}

// workerIDs is LEAF_WORKER_ID_RANGE as set, or unset every worker ID of
// the layout, as the contract records it.
func (c Config) workerIDs() string {
	if c.WorkerIDRange != "" {
		return c.WorkerIDRange
	}
	return c.allWorkerIDs().String()
}

// allWorkerIDs is every worker ID this vendor may claim: its region's
// block, or every one of the layout with no region.
func (c Config) allWorkerIDs() workerid.Range {
	l, _ := c.layout()
	if r, ok, _ := c.region(); ok {
		first, last, _ := l.RegionWorkers(r.ID) // checked by region
		return workerid.Range{First: first, Last: last}
	}
	return workerid.AllOf(l)
}

// instanceName names this vendor process: in lease values, the contract,
// the peers' exchange, its status and the cluster table.
func instanceName() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s/%d", host, os.Getpid())
}

// storeName is the contract's name of a segment store: its kind and the
// identity it keeps in itself.
func storeName(kind string, info segment.StoreInfo) string { return kind + ":" + info.ID }

// workerIDRange parses LEAF_WORKER_ID_RANGE, "first-last", a range of the
// layout's worker IDs.
func (c Config) workerIDRange() (workerid.Range, error) {
	r, err := workerid.ParseRange(c.workerIDs())
	if err != nil {
		return r, fmt.Errorf("LEAF_WORKER_ID_RANGE %w", err)
	}
	if l, err := c.layout(); err == nil && r.CheckIn(l) != nil {
		all := workerid.AllOf(l)
		return workerid.Range{First: 0, Last: -1}, fmt.Errorf("LEAF_WORKER_ID_RANGE %s is not within %s, the worker IDs of LEAF_SNOWFLAKE_LAYOUT=%s: set LEAF_WORKER_ID_RANGE within %s, or unset it for all of them",
			r, all, l.Name(), all)
	}
	if reg, ok, err := c.region(); err == nil && ok {
		if all := c.allWorkerIDs(); r.First < all.First || r.Last > all.Last {
			return workerid.Range{First: 0, Last: -1}, fmt.Errorf("LEAF_WORKER_ID_RANGE %s is not within %s, the worker IDs of region %s: set LEAF_WORKER_ID_RANGE within %s, or unset it for all of them",
				r, all, reg, all)
		}
	}
	return r, nil
}

// env is the environment `vendor tags` and `vendor cluster` act in: what a
// vendor with this configuration would use.
func (c Config) env() (admin.Env, error) {
	opts, err := c.natsOptions()
	return admin.Env{NATSURL: c.NATSURL, StoreDir: c.NATSStoreDir, Listen: c.NATSListen, NATSOptions: opts, PostgresURL: c.PostgresURL,
		KVReplicas: c.KVReplicas, Terms: c.terms(), LeaseTTL: c.WorkerLeaseTTL, MaxSkew: c.ClockMaxSkew, Self: instanceName(), Region: c.Region}, err
}

// staticWorkerID returns the pinned worker ID, or -1 when unset.
func (c Config) staticWorkerID() (int, error) {
	if c.WorkerID == "" {
		return -1, nil
	}
	l, _ := c.layout()
	id, err := strconv.Atoi(strings.TrimSpace(c.WorkerID))
	if err != nil || id < 0 || id > l.MaxWorkerID() {
		return -1, fmt.Errorf("LEAF_WORKER_ID %q: want 0..%d (the worker IDs of LEAF_SNOWFLAKE_LAYOUT=%s), or unset to claim one from KV", c.WorkerID, l.MaxWorkerID(), l.Name())
	}
	return id, nil
}

// maxBackward maps LEAF_CLOCK_TOLERANCE to the generator's setting, where 0
// means the default: a tolerance of 0 waits out nothing.
func (c Config) maxBackward() time.Duration {
	if c.ClockTolerance == 0 {
		return -1
	}
	return c.ClockTolerance
}

func (c Config) workerFile(id int) string {
	if c.WorkerFile != "" {
		return c.WorkerFile
	}
	return filepath.Join(c.NATSStoreDir, fmt.Sprintf("worker-%d.last", id))
}

// natsOptions turns the authentication and TLS settings into nats options.
func (c Config) natsOptions() ([]nats.Option, error) {
	var opts []nats.Option
	if c.NATSCreds != "" {
		opts = append(opts, nats.UserCredentials(c.NATSCreds))
	}
	if c.NATSNKey != "" {
		o, err := nats.NkeyOptionFromSeed(c.NATSNKey)
		if err != nil {
			return nil, fmt.Errorf("LEAF_NATS_NKEY: %w", err)
		}
		opts = append(opts, o)
	}
	if c.NATSUser != "" {
		opts = append(opts, nats.UserInfo(c.NATSUser, c.NATSPassword))
	}
	if c.NATSToken != "" {
		opts = append(opts, nats.Token(c.NATSToken))
	}
	if c.NATSTLSCA != "" {
		opts = append(opts, nats.RootCAs(c.NATSTLSCA))
	}
	if c.NATSTLSCert != "" {
		opts = append(opts, nats.ClientCert(c.NATSTLSCert, c.NATSTLSKey))
	}
	return opts, nil
}

func (c Config) logger(w io.Writer) *slog.Logger {
	var lvl slog.Level
	lvl.UnmarshalText([]byte(c.LogLevel))
	ho := &slog.HandlerOptions{Level: lvl}
	if c.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, ho))
	}
	return slog.New(slog.NewTextHandler(w, ho))
}

func usage(w io.Writer) {
	fmt.Fprint(w, `vendor: a leaf-nats worker, vending unique 64-bit IDs over NATS.

Usage:
  vendor
      serve (embedded NATS unless LEAF_NATS_URL is set)
`)
	for _, group := range [][]subcommand{tagCommands, clusterCommands} {
		for _, c := range group {
			fmt.Fprintf(w, "  %s\n      %s\n", c.Synopsis, c.Summary)
		}
	}
	fmt.Fprint(w, `  vendor healthcheck [/readyz|/healthz]
      ask the vendor on LEAF_HTTP_ADDR: exit 0 on 200 OK (the image's health check)
  vendor version
      version, VCS revision and Go version (also --version)
  vendor <command> -h
      a command's flags and what it does

Requests (nats req <subject> <count>; empty body means one ID):
  <prefix>.snowflake          snowflake IDs
  <prefix>.segment.<tag>      segment IDs of business tag <tag>
  <prefix>.snowflake.decode   body: one ID; reply: its time, worker ID and sequence

Leaf's HTTP API, with LEAF_HTTP_LEAF_API=true, on LEAF_HTTP_ADDR:
  GET /api/segment/get/<tag>  GET /api/snowflake/get/<key>

Configuration (environment):
`)
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	envconfig.Usagef(envPrefix, &Config{}, tw, `{{range .}}  {{usage_key .}}	{{usage_default .}}	{{usage_description .}}
{{end}}`)
	tw.Flush()
	fmt.Fprintln(w, `
(an empty default column means unset)`)
}
