package pgbench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acme/outboxpair/bench/internal/db"
	"github.com/acme/outboxpair/bench/internal/sitting"
	"github.com/acme/outboxpair/infra/outbox"
)

// The pair reference: pgbench running the SQL the pair runs per event, the
// limit of this design on this machine. One pgbench transaction is a unit of
// events: the claims that take them (the relay's claim statement at the
// default claim size), billing's transaction for each (ConsumerScript), and
// the settles that record them (the relay's settle statement at the settler's
// batch size). The statements are not copied: they are captured from the relay
// of this tree (a RunOnce through a pgx tracer, capturePairSQL), and each
// parameter becomes a pgbench variable or, for clock values and the claim
// token, the SQL expression that computes them, so the reference follows the
// relay as it changes. Both schemas share one database (billing's tables in
// schema billing), so one pgbench client runs the whole unit.

// settleBatch is the settler's flush size (infra/outbox settle.go flushBatch):
// a drain settles in statements of this many outcomes.
const settleBatch = 100

// maxPairUnit bounds a unit's events: beyond it a unit is one settle batch.
const maxPairUnit = 1000

// capturedSQL is one statement the relay sent, its arguments, and whether it
// ran with synchronous_commit off (its commit not waiting for the WAL flush).
type capturedSQL struct {
	sql   string
	args  []any
	async bool
}

// sqlCapture is a pgx tracer that keeps the relay's claim (the statement with
// SKIP LOCKED) and its settle (any other UPDATE of outbox_events), and follows
// synchronous_commit on each connection: a startup parameter, or a SET (LOCAL
// until the transaction ends) before the statement.
type sqlCapture struct {
	mu            sync.Mutex
	claim, settle *capturedSQL
	async         map[*pgx.Conn]syncState
}

type syncState struct{ off, local bool }

// TraceQueryStart implements pgx.QueryTracer: it keeps the first claim and
// settle, and follows synchronous_commit.
func (c *sqlCapture) TraceQueryStart(ctx context.Context, conn *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	up := strings.ToUpper(d.SQL)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.async == nil {
		c.async = map[*pgx.Conn]syncState{}
	}
	st := c.async[conn]
	async := st.off || strings.EqualFold(conn.Config().RuntimeParams["synchronous_commit"], "off")
	switch t := strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(up), ";")); {
	case strings.Contains(up, "SYNCHRONOUS_COMMIT"):
		c.async[conn] = syncState{off: strings.Contains(up, "OFF"), local: strings.Contains(up, "LOCAL") || strings.Contains(up, "TRUE)")}
	case t == "COMMIT" || t == "ROLLBACK" || t == "END":
		if st.local {
			delete(c.async, conn)
		}
	case strings.Contains(up, "SKIP LOCKED"):
		if c.claim == nil {
			c.claim = &capturedSQL{d.SQL, d.Args, async}
		}
	case strings.Contains(up, "UPDATE OUTBOX_EVENTS"):
		if c.settle == nil {
			c.settle = &capturedSQL{d.SQL, d.Args, async}
		}
	}
	return ctx
}

// TraceQueryEnd implements pgx.QueryTracer; it has nothing to do.
func (c *sqlCapture) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// pairSQL is what capturePairSQL learnt: the statements, their arguments, and
// the markers that identify the arguments.
type pairSQL struct {
	claim, settle capturedSQL
	at            int64 // wall clock (epoch ms) when captured
	limit         int   // the capture's claim limit
}

// capturePairSQL runs one RunOnce of a relay with the benchmark's settings on
// a scratch database, with a claim limit no other argument has.
func capturePairSQL(ctx context.Context, s *sitting.Sitting) (pairSQL, error) {
	dbURL, err := s.Env.Create(ctx, sitting.SchemaLabeling)
	if err != nil {
		return pairSQL{}, err
	}
	defer s.Env.Drop(context.WithoutCancel(ctx), dbURL)
	cfg := s.Relay
	limit := 0
	for _, c := range []int{7, 6, 5, 3, 2} {
		if c != cfg.MaxAttempts && c != cfg.ClaimSize && time.Duration(c)*cfg.HandlerTimeout <= cfg.Lease {
			limit = c
			break
		}
	}
	if limit == 0 {
		return pairSQL{}, errors.New("capture: no claim limit distinct from the other settings fits the lease")
	}
	cfg.ClaimSize, cfg.Workers, cfg.Notify = limit, limit, false
	capture := &sqlCapture{}
	pcfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return pairSQL{}, err
	}
	pcfg.ConnConfig.Tracer = capture
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return pairSQL{}, err
	}
	defer pool.Close()
	if err := db.Preload(ctx, pool, limit); err != nil {
		return pairSQL{}, err
	}
	relay, err := outbox.NewRelay(outbox.NewPostgresStore(pool), cfg, sitting.NoopSubs(), sitting.Quiet())
	if err != nil {
		return pairSQL{}, err
	}
	defer sitting.StopRelay(relay) //nolint:errcheck // never started: nothing to settle
	at := time.Now().UnixMilli()
	n, err := relay.RunOnce(ctx)
	if err != nil {
		return pairSQL{}, fmt.Errorf("capture: RunOnce: %w", err)
	}
	if n != limit {
		return pairSQL{}, fmt.Errorf("capture: RunOnce claimed %d of %d rows", n, limit)
	}
	capture.mu.Lock()
	defer capture.mu.Unlock()
	if capture.claim == nil || capture.settle == nil {
		return pairSQL{}, errors.New("capture: the relay's claim or settle statement was not seen")
	}
	return pairSQL{claim: *capture.claim, settle: *capture.settle, at: at, limit: limit}, nil
}

// clockMs is the statement's own time in epoch ms: what the relay passes as
// "now", computed by the server once per statement.
const clockMs = `(extract(epoch from statement_timestamp()) * 1000)::bigint`

// nearNow is how far from the capture's wall clock an integer argument may be
// and still be read as a time (now, now + lease, ...).
const nearNow = int64(24 * time.Hour / time.Millisecond)

func asInt(v any) (int64, bool) {
	switch x := v.(type) {
	case int:
		return int64(x), true
	case int32:
		return int64(x), true
	case int64:
		return x, true
	}
	return 0, false
}

// claimParams turns the captured claim's arguments into pgbench text: a time
// becomes clockMs plus its offset from the claim's now (the smallest time among
// them); 0 is the scan floor (RunOnce claims from the bottom), the variable
// :floor; the capture's limit is {LIMIT}; the token (a UUID) is {TOKEN}; any
// other integer is a constant, a pgbench variable :cN (a parameter, as the
// relay sends it); a string (the lane's subscriber) a literal. vars are the \set lines for the constants. A claim whose
// limit is not a parameter (written into its text) is left to pairScript.
func claimParams(args []any, at int64, limit int) (exprs, vars []string, err error) {
	now := int64(0)
	for _, a := range args {
		if v, ok := asInt(a); ok && v-at < nearNow && at-v < nearNow && (now == 0 || v < now) {
			now = v
		}
	}
	seenLimit, seenToken := false, false
	for i, a := range args {
		if _, ok := a.(uuid.UUID); ok {
			exprs, seenToken = append(exprs, "{TOKEN}"), true
			continue
		}
		if s, ok := a.(string); ok { // the lane's subscriber ('' for billing's rows)
			exprs = append(exprs, quoteLiteral(s)+"::text")
			continue
		}
		v, ok := asInt(a)
		switch {
		case !ok:
			return nil, nil, fmt.Errorf("claim parameter $%d is a %T: bench/internal/pgbench/pair.go knows integers, strings and a UUID token", i+1, a)
		case now != 0 && v-at < nearNow && at-v < nearNow:
			exprs = append(exprs, fmt.Sprintf("(%s + %d)", clockMs, v-now))
		case v == 0:
			exprs = append(exprs, ":floor")
		case v == int64(limit):
			if seenLimit {
				return nil, nil, fmt.Errorf("claim parameters $%d and another both equal the capture's limit %d", i+1, limit)
			}
			exprs, seenLimit = append(exprs, "{LIMIT}"), true
		default:
			name := fmt.Sprintf("c%d", i+1)
			vars = append(vars, fmt.Sprintf(`\set %s %d`, name, v))
			exprs = append(exprs, ":"+name)
		}
	}
	if !seenToken {
		return nil, nil, fmt.Errorf("claim parameters %v: no UUID token among them", args)
	}
	return exprs, vars, nil
}

// settleParams turns the captured settle's arguments (arrays, one element per
// outcome) into SQL for a batch of n: the UUID array of distinct ids is {IDS},
// the one repeating the claim's token {TOKENS}; an array repeating one value
// is array_fill of it (a time: clockMs).
func settleParams(args []any, at int64) ([]string, error) {
	var exprs []string
	isTime := func(v int64) bool { return v-at < nearNow && at-v < nearNow }
	for i, a := range args {
		switch x := a.(type) {
		case []uuid.UUID:
			if len(x) > 1 && x[0] == x[len(x)-1] {
				exprs = append(exprs, "{TOKENS}")
			} else {
				exprs = append(exprs, "{IDS}")
			}
		case []string:
			if !allSame(x) {
				return nil, fmt.Errorf("settle parameter $%d: outcomes differ (%v)", i+1, x)
			}
			exprs = append(exprs, fmt.Sprintf("array_fill(%s::text, ARRAY[{N}])", quoteLiteral(x[0])))
		case []int64:
			if !allSame(x) && !isTime(x[0]) {
				return nil, fmt.Errorf("settle parameter $%d: values differ (%v)", i+1, x)
			}
			v := strconv.FormatInt(x[0], 10)
			if isTime(x[0]) {
				v = clockMs
			}
			exprs = append(exprs, fmt.Sprintf("array_fill(%s::bigint, ARRAY[{N}])", v))
		case []*string:
			v := "NULL"
			if len(x) > 0 && x[0] != nil {
				v = quoteLiteral(*x[0])
			}
			exprs = append(exprs, fmt.Sprintf("array_fill(%s::text, ARRAY[{N}])", v))
		default:
			return nil, fmt.Errorf("settle parameter $%d is a %T: bench/internal/pgbench/pair.go knows uuid, text, bigint and nullable text arrays", i+1, a)
		}
	}
	return exprs, nil
}

func allSame[T comparable](x []T) bool {
	for _, v := range x {
		if v != x[0] {
			return false
		}
	}
	return len(x) > 0
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

var paramRE = regexp.MustCompile(`\$(\d+)`)

// substitute replaces $1..$N in sql with exprs (never inside a longer number:
// $10 is not $1 followed by 0).
func substitute(sql string, exprs []string) (string, error) {
	var err error
	out := paramRE.ReplaceAllStringFunc(sql, func(m string) string {
		i, _ := strconv.Atoi(m[1:])
		if i < 1 || i > len(exprs) {
			err = fmt.Errorf("statement uses %s, but %d arguments were captured", m, len(exprs))
			return m
		}
		return exprs[i-1]
	})
	return out, err
}

// oneLine folds a statement onto one line: pgbench reads a command per line.
func oneLine(sql string) string { return strings.Join(strings.Fields(sql), " ") }

// pairUnit is how many events one pgbench transaction of the pair reference
// covers, and the claims that take them: the least common multiple of the
// claim size and the settle batch, so that every claim and settle is full, or
// one settle batch (the last claim smaller) when that is over maxPairUnit.
func pairUnit(claimSize, settle int) (unit int, claims []int) {
	unit = claimSize / gcd(claimSize, settle) * settle
	if unit > maxPairUnit {
		unit = settle
	}
	for left := unit; left > 0; left -= claimSize {
		claims = append(claims, min(claimSize, left))
	}
	return unit, claims
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// pairScript is the pgbench script of one unit (see the top of this file).
func pairScript(p pairSQL, claimSize int, billingTxn string) (script string, unit int, err error) {
	cexprs, vars, err := claimParams(p.claim.args, p.at, p.limit)
	if err != nil {
		return "", 0, err
	}
	claim, err := substitute(oneLine(p.claim.sql), cexprs)
	if err != nil {
		return "", 0, fmt.Errorf("claim: %w", err)
	}
	// A limit written into the statement stays a literal, as the relay writes
	// it (the claim may have both: a literal claim size and a parameter for the
	// free workers, equal at capture).
	lit := regexp.MustCompile(`(?i)\bLIMIT\s+` + strconv.Itoa(p.limit) + `\b`)
	if !strings.Contains(claim, "{LIMIT}") && !lit.MatchString(claim) {
		return "", 0, fmt.Errorf("claim: its limit (%d at capture) is neither a parameter nor a literal LIMIT", p.limit)
	}
	claim = lit.ReplaceAllString(claim, "LIMIT {LITERAL}")
	sexprs, err := settleParams(p.settle.args, p.at)
	if err != nil {
		return "", 0, err
	}
	settle, err := substitute(oneLine(p.settle.sql), sexprs)
	if err != nil {
		return "", 0, fmt.Errorf("settle: %w", err)
	}
	unit, claims := pairUnit(claimSize, settleBatch)
	var sb strings.Builder
	// Each client claims from its own part of the backlog (rows base + c × per
	// up), as one relay claims from its own floor: clients that shared one
	// would each walk over the rows the others hold, which no relay does.
	sb.WriteString("\\set u :u + 1\n\\if :u = 1\n\\set floor :base + :client_id * :per\n\\endif\n")
	for _, v := range vars {
		sb.WriteString(v + "\n")
	}
	// A statement the relay commits without waiting for the WAL flush runs so
	// here too; billing's transaction waits for it, as billing's does.
	asyncOn := func(on bool) {
		if on {
			sb.WriteString("SET synchronous_commit = off;\n")
		}
	}
	asyncOff := func(on bool) {
		if on {
			sb.WriteString("SET synchronous_commit = on;\n")
		}
	}
	var ids, toks []string
	asyncOn(p.claim.async)
	for k, n := range claims {
		fmt.Fprintf(&sb, "\\set lim%d %d\n", k, n)
		token := fmt.Sprintf("md5(:client_id::text || '.' || :u::text || '.%d')::uuid", k)
		stmt := strings.NewReplacer("{TOKEN}", "("+token+")", "{LIMIT}", fmt.Sprintf(":lim%d", k), "{LITERAL}", strconv.Itoa(n)).Replace(claim)
		fmt.Fprintf(&sb, "WITH c AS (%s) SELECT coalesce(array_agg(id), '{}')::text AS ids%d, array_fill(%s, ARRAY[count(*)::int])::text AS toks%d, coalesce(max(created_at), :floor::bigint) AS floor FROM c \\gset\n",
			stmt, k, token, k)
		ids = append(ids, fmt.Sprintf(":ids%d::uuid[]", k))
		toks = append(toks, fmt.Sprintf(":toks%d::uuid[]", k))
	}
	asyncOff(p.claim.async)
	body := strings.TrimSpace(billingTxn)
	for range unit {
		sb.WriteString(body + "\n")
	}
	allIDs, allToks := "("+strings.Join(ids, " || ")+")", "("+strings.Join(toks, " || ")+")"
	asyncOn(p.settle.async)
	for s := 0; s < unit; s += settleBatch {
		n := min(settleBatch, unit-s)
		slice := fmt.Sprintf("[%d:%d]", s+1, s+n)
		sb.WriteString(strings.NewReplacer("{IDS}", allIDs+slice, "{TOKENS}", allToks+slice, "{N}", strconv.Itoa(n)).Replace(settle) + ";\n")
	}
	asyncOff(p.settle.async)
	return sb.String(), unit, nil
}

// Pair is the pair reference of one sitting: the relay's statements are
// captured at its first run and reused by the later ones.
type Pair struct {
	sql *pairSQL
}

// Run runs the pair reference with clients clients for d on a fresh
// database of s holding a backlog it cannot exhaust, and returns events/s.
func (p *Pair) Run(ctx context.Context, s *sitting.Sitting, clients int, d time.Duration) (float64, error) {
	if p.sql == nil {
		c, err := capturePairSQL(ctx, s)
		if err != nil {
			return 0, err
		}
		p.sql = &c
	}
	script, unit, err := pairScript(*p.sql, s.Relay.ClaimSize, ConsumerScript)
	if err != nil {
		return 0, fmt.Errorf("pair script: %w", err)
	}
	dbURL, err := s.Env.Create(ctx, sitting.SchemaPair)
	if err != nil {
		return 0, err
	}
	defer s.Env.Drop(context.WithoutCancel(ctx), dbURL)
	pool, err := sitting.Open(ctx, dbURL)
	if err != nil {
		return 0, err
	}
	defer pool.Close()
	secs := max(1, int(d.Round(time.Second).Seconds()))
	per := max(10000*secs/clients, 4*unit)
	if err := db.Preload(ctx, pool, per*clients); err != nil {
		return 0, err
	}
	var base int64
	if err := pool.QueryRow(ctx, `SELECT min(created_at) FROM outbox_events`).Scan(&base); err != nil {
		return 0, err
	}
	pgURL, err := sitting.PairURL(dbURL, true)
	if err != nil {
		return 0, err
	}
	tps, err := runWith(ctx, s, pgURL, script, clients, d, "u=0", "floor=0",
		"base="+strconv.FormatInt(base, 10), "per="+strconv.Itoa(per))
	if err != nil {
		return 0, err
	}
	// Every client must still have rows of its own left: one that ran out
	// would have timed empty claims.
	var parts int
	err = pool.QueryRow(ctx, `SELECT count(DISTINCT (created_at - $1::bigint) / $2::bigint) FROM outbox_events
		WHERE processed_at IS NULL AND failed_at IS NULL AND claimed_until IS NULL`, base, per).Scan(&parts)
	if err != nil {
		return 0, err
	}
	if parts < clients {
		return 0, fmt.Errorf("pair pgbench: %d of %d clients ran out of backlog before the run ended: the rate would count empty claims", clients-parts, clients)
	}
	return tps * float64(unit), nil
}

// runWith is Run with initial variables defs ("name=value") instead of i=0.
func runWith(ctx context.Context, s *sitting.Sitting, dbURL, script string, clients int, d time.Duration, defs ...string) (float64, error) {
	f := filepath.Join(s.Tmp, fmt.Sprintf("pair-%d.sql", time.Now().UnixNano()))
	if err := os.WriteFile(f, []byte(script), 0o600); err != nil {
		return 0, err
	}
	defer os.Remove(f)
	secs := max(1, int(d.Round(time.Second).Seconds()))
	ctx, cancel := context.WithTimeout(ctx, d+time.Minute)
	defer cancel()
	args := []string{"-n", "-M", "prepared", "-f", f, "-c", strconv.Itoa(clients), "-j", strconv.Itoa(min(clients, 2)), "-T", strconv.Itoa(secs)}
	for _, def := range defs {
		args = append(args, "-D", def)
	}
	out, err := exec.CommandContext(ctx, s.PgbenchPath, append(args, dbURL)...).CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("pgbench: %w\n%s", err, out)
	}
	m := tpsRE.FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("pgbench: no tps in its output:\n%s", out)
	}
	return strconv.ParseFloat(string(m[1]), 64)
}
