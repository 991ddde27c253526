package shop

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
	_ "modernc.org/sqlite"             // registers the pure-Go "sqlite" driver
)

// Order is one row of the orders table.
type Order struct {
	ID       int64
	Activity string
	SKU      string
	User     string
	Qty      int64
	Token    string // empty for legacy (untokened) orders
}

// Outcome of an order attempt.
type Outcome int

// Order outcomes, each mapped to one HTTP answer by the handler.
const (
	Created     Outcome = iota // new order row
	Existing                   // same token seen before: idempotent replay
	Duplicate                  // (activity, user, sku) already ordered with another token
	SoldOut                    // legacy: stock row at zero
	UnknownItem                // legacy: no stock row and no default stock
)

// db hides the two SQL dialects. Both run the same statements; only the
// placeholders, the schema types and the legacy locking differ.
type db struct {
	sql      *sql.DB
	postgres bool
}

func openDB(ctx context.Context, dsn string) (*db, error) {
	d, err := connectDB(ctx, dsn)
	if err != nil {
		return nil, err
	}
	if err := d.migrate(ctx); err != nil {
		_ = d.sql.Close() // the migration error is the one to report
		return nil, err
	}
	return d, nil
}

func connectDB(ctx context.Context, dsn string) (*db, error) {
	switch {
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		s, err := sql.Open("pgx", dsn)
		if err != nil {
			return nil, fmt.Errorf("open postgres: %w", err)
		}
		// Well under PostgreSQL's default max_connections (100), which other
		// clients of the same server share; orders queue on the stock row's
		// lock anyway, so more connections would only wait there.
		s.SetMaxOpenConns(32)
		s.SetMaxIdleConns(32)
		d := &db{sql: s, postgres: true}
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if err := s.PingContext(pctx); err != nil {
			_ = s.Close() // the ping error is the one to report
			return nil, fmt.Errorf("connect postgres: %w", err)
		}
		return d, nil
	case strings.HasPrefix(dsn, "sqlite:"):
		path := strings.TrimPrefix(dsn, "sqlite:")
		if path == "" {
			return nil, errors.New("sqlite DSN needs a file path (sqlite:/tmp/shop.db)")
		}
		s, err := sql.Open("sqlite", "file:"+path+
			"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)&_pragma=synchronous(NORMAL)")
		if err != nil {
			return nil, fmt.Errorf("open sqlite %s: %w", path, err)
		}
		// One writer connection: SQLite serialises writers anyway, and a pool
		// would only turn contention into SQLITE_BUSY errors.
		s.SetMaxOpenConns(1)
		return &db{sql: s}, nil
	default:
		return nil, fmt.Errorf("unsupported --db %q: want sqlite:PATH or postgres://USER:PASS@HOST/DB", dsn)
	}
}

// q rewrites ? placeholders to $n for PostgreSQL.
func (d *db) q(query string) string {
	if !d.postgres {
		return query
	}
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func (d *db) migrate(ctx context.Context) error {
	id, ts := "INTEGER PRIMARY KEY AUTOINCREMENT", "INTEGER NOT NULL"
	if d.postgres {
		id, ts = "BIGSERIAL PRIMARY KEY", "BIGINT NOT NULL"
	}
	stmts := []string{
		`CREATE TABLE IF NOT EXISTS orders (
			id ` + id + `,
			activity TEXT NOT NULL,
			sku TEXT NOT NULL,
			user_id TEXT NOT NULL,
			qty INTEGER NOT NULL,
			token TEXT UNIQUE,
			created_at ` + ts + `,
			UNIQUE (activity, user_id, sku))`,
		`CREATE TABLE IF NOT EXISTS stock (
			activity TEXT NOT NULL,
			sku TEXT NOT NULL,
			initial INTEGER NOT NULL,
			stock INTEGER NOT NULL,
			PRIMARY KEY (activity, sku))`,
	}
	for _, s := range stmts {
		if _, err := d.sql.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
	}
	return nil
}

// truncate empties both tables (or one activity's rows), restoring stock.
func (d *db) reset(ctx context.Context, activity string) error {
	if activity == "" {
		if _, err := d.sql.ExecContext(ctx, `DELETE FROM orders`); err != nil {
			return fmt.Errorf("reset orders: %w", err)
		}
		if _, err := d.sql.ExecContext(ctx, `UPDATE stock SET stock = initial`); err != nil {
			return fmt.Errorf("reset stock: %w", err)
		}
		return nil
	}
	if _, err := d.sql.ExecContext(ctx, d.q(`DELETE FROM orders WHERE activity = ?`), activity); err != nil {
		return fmt.Errorf("reset orders of %s: %w", activity, err)
	}
	if _, err := d.sql.ExecContext(ctx, d.q(`UPDATE stock SET stock = initial WHERE activity = ?`), activity); err != nil {
		return fmt.Errorf("reset stock of %s: %w", activity, err)
	}
	return nil
}

// setStock creates or overwrites a stock row.
func (d *db) setStock(ctx context.Context, activity, sku string, n int64) error {
	_, err := d.sql.ExecContext(ctx, d.q(`INSERT INTO stock (activity, sku, initial, stock) VALUES (?, ?, ?, ?)
		ON CONFLICT (activity, sku) DO UPDATE SET initial = excluded.initial, stock = excluded.stock`),
		activity, sku, n, n)
	if err != nil {
		return fmt.Errorf("set stock %s/%s: %w", activity, sku, err)
	}
	return nil
}

// ensureStock creates a stock row with n units unless one exists.
func (d *db) ensureStock(ctx context.Context, activity, sku string, n int64) error {
	_, err := d.sql.ExecContext(ctx, d.q(`INSERT INTO stock (activity, sku, initial, stock) VALUES (?, ?, ?, ?)
		ON CONFLICT (activity, sku) DO NOTHING`), activity, sku, n, n)
	if err != nil {
		return fmt.Errorf("ensure stock %s/%s: %w", activity, sku, err)
	}
	return nil
}

func nullToken(t string) any {
	if t == "" {
		return nil
	}
	return t
}

// insertOrder inserts o inside tx. ON CONFLICT DO NOTHING RETURNING (both
// SQLite ≥ 3.35 and PostgreSQL) tells a conflict apart without parsing
// driver-specific error codes: no row back means some unique key collided.
func (d *db) insertOrder(ctx context.Context, ex interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, o Order) (int64, bool, error) {
	var id int64
	err := ex.QueryRowContext(ctx, d.q(`INSERT INTO orders (activity, sku, user_id, qty, token, created_at)
		VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING RETURNING id`),
		o.Activity, o.SKU, o.User, o.Qty, nullToken(o.Token), time.Now().UnixMilli()).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("insert order: %w", err)
	}
	return id, true, nil
}

// orderByToken returns the id of the order carrying token, 0 if none.
func (d *db) orderByToken(ctx context.Context, token string) (int64, error) {
	var id int64
	err := d.sql.QueryRowContext(ctx, d.q(`SELECT id FROM orders WHERE token = ?`), token).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("find order by token: %w", err)
	}
	return id, nil
}

// createTokened places an order that came through the proxy. A replayed token
// answers the existing order, so a proxy retry never makes two orders.
func (d *db) createTokened(ctx context.Context, o Order) (int64, Outcome, error) {
	if id, err := d.orderByToken(ctx, o.Token); err != nil || id != 0 {
		return id, Existing, err
	}
	id, ok, err := d.insertOrder(ctx, d.sql, o)
	if err != nil {
		return 0, 0, err
	}
	if ok {
		return id, Created, nil
	}
	// Conflict: the same token raced us in (replay), or the user already
	// holds this SKU under another token.
	id, err = d.orderByToken(ctx, o.Token)
	if err != nil {
		return 0, 0, err
	}
	if id != 0 {
		return id, Existing, nil
	}
	return 0, Duplicate, nil
}

// legacyBuy is what the shops of the published write-ups do alone: lock or
// conditionally decrement one stock row per order, then insert the order, in
// one transaction. Every buyer of a SKU queues on that row: the baseline that
// melts under a spike.
func (d *db) legacyBuy(ctx context.Context, o Order, defaultStock int64) (int64, Outcome, error) {
	if o.Token != "" {
		if id, err := d.orderByToken(ctx, o.Token); err != nil || id != 0 {
			return id, Existing, err
		}
	}
	if defaultStock > 0 {
		if err := d.ensureStock(ctx, o.Activity, o.SKU, defaultStock); err != nil {
			return 0, 0, err
		}
	}
	tx, err := d.sql.BeginTx(ctx, nil)
	if err != nil {
		return 0, 0, fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // no-op after Commit

	if d.postgres {
		var stock int64
		err := tx.QueryRowContext(ctx, `SELECT stock FROM stock WHERE activity = $1 AND sku = $2 FOR UPDATE`,
			o.Activity, o.SKU).Scan(&stock)
		if errors.Is(err, sql.ErrNoRows) {
			return 0, UnknownItem, nil
		}
		if err != nil {
			return 0, 0, fmt.Errorf("lock stock: %w", err)
		}
		if stock <= 0 {
			return 0, SoldOut, nil
		}
		if _, err := tx.ExecContext(ctx, `UPDATE stock SET stock = stock - 1 WHERE activity = $1 AND sku = $2`,
			o.Activity, o.SKU); err != nil {
			return 0, 0, fmt.Errorf("decrement stock: %w", err)
		}
	} else {
		res, err := tx.ExecContext(ctx, `UPDATE stock SET stock = stock - 1 WHERE activity = ? AND sku = ? AND stock > 0`,
			o.Activity, o.SKU)
		if err != nil {
			return 0, 0, fmt.Errorf("decrement stock: %w", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return 0, 0, fmt.Errorf("decrement stock: %w", err)
		}
		if n == 0 {
			var one int
			err := tx.QueryRowContext(ctx, `SELECT 1 FROM stock WHERE activity = ? AND sku = ?`, o.Activity, o.SKU).Scan(&one)
			if errors.Is(err, sql.ErrNoRows) {
				return 0, UnknownItem, nil
			}
			if err != nil {
				return 0, 0, fmt.Errorf("read stock: %w", err)
			}
			return 0, SoldOut, nil
		}
	}
	id, ok, err := d.insertOrder(ctx, tx, o)
	if err != nil {
		return 0, 0, err
	}
	if !ok {
		return 0, Duplicate, nil // rollback gives the unit back
	}
	if err := tx.Commit(); err != nil {
		return 0, 0, fmt.Errorf("commit: %w", err)
	}
	return id, Created, nil
}

// SKUSummary is the order and stock figures of one SKU.
type SKUSummary struct {
	SKU    string `json:"sku"`
	Orders int64  `json:"orders"`
	Units  int64  `json:"units"`
	// HasStock is true when the shop keeps a stock row (legacy mode).
	HasStock       bool  `json:"has_stock"`
	StockInitial   int64 `json:"stock_initial"`
	StockRemaining int64 `json:"stock_remaining"`
}

// Summary is what GET /internal/summary answers: everything the bench needs
// to check the invariants from the shop's side.
type Summary struct {
	Activity           string       `json:"activity"`
	Legacy             bool         `json:"legacy"`
	Orders             int64        `json:"orders"`
	Units              int64        `json:"units"`
	Users              int64        `json:"users"`
	MaxUnitsPerUser    int64        `json:"max_units_per_user"`
	OrdersWithoutToken int64        `json:"orders_without_token"`
	BadSignatures      int64        `json:"bad_signatures"`
	SKUs               []SKUSummary `json:"skus"`
}

func (d *db) summary(ctx context.Context, activity string) (Summary, error) {
	s := Summary{Activity: activity, SKUs: []SKUSummary{}}
	err := d.sql.QueryRowContext(ctx, d.q(`SELECT COUNT(*), COALESCE(SUM(qty), 0), COUNT(DISTINCT user_id),
		COALESCE(SUM(CASE WHEN token IS NULL THEN 1 ELSE 0 END), 0) FROM orders WHERE activity = ?`), activity).
		Scan(&s.Orders, &s.Units, &s.Users, &s.OrdersWithoutToken)
	if err != nil {
		return s, fmt.Errorf("summary totals: %w", err)
	}
	err = d.sql.QueryRowContext(ctx, d.q(`SELECT COALESCE(MAX(u), 0) FROM
		(SELECT SUM(qty) AS u FROM orders WHERE activity = ? GROUP BY user_id) per_user`), activity).Scan(&s.MaxUnitsPerUser)
	if err != nil {
		return s, fmt.Errorf("summary per user: %w", err)
	}
	bySKU := map[string]*SKUSummary{}
	get := func(sku string) *SKUSummary {
		if p, ok := bySKU[sku]; ok {
			return p
		}
		s.SKUs = append(s.SKUs, SKUSummary{SKU: sku})
		p := &s.SKUs[len(s.SKUs)-1]
		bySKU[sku] = p
		return p
	}
	type row struct {
		sku        string
		a, b       int64
		stockTable bool
	}
	var rows []row
	for _, part := range []struct {
		query string
		stock bool
	}{
		{`SELECT sku, COUNT(*), COALESCE(SUM(qty), 0) FROM orders WHERE activity = ? GROUP BY sku ORDER BY sku`, false},
		{`SELECT sku, initial, stock FROM stock WHERE activity = ? ORDER BY sku`, true},
	} {
		rs, err := d.sql.QueryContext(ctx, d.q(part.query), activity)
		if err != nil {
			return s, fmt.Errorf("summary per sku: %w", err)
		}
		for rs.Next() {
			r := row{stockTable: part.stock}
			if err := rs.Scan(&r.sku, &r.a, &r.b); err != nil {
				_ = rs.Close() // the scan error is the one to report
				return s, fmt.Errorf("summary per sku: %w", err)
			}
			rows = append(rows, r)
		}
		err = rs.Err()
		if cerr := rs.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return s, fmt.Errorf("summary per sku: %w", err)
		}
	}
	// Grow the slice first so the pointers in bySKU stay valid.
	s.SKUs = make([]SKUSummary, 0, len(rows))
	for _, r := range rows {
		p := get(r.sku)
		if r.stockTable {
			p.HasStock, p.StockInitial, p.StockRemaining = true, r.a, r.b
		} else {
			p.Orders, p.Units = r.a, r.b
		}
	}
	return s, nil
}

func (d *db) close() error { return d.sql.Close() }
