package pgconsumer

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Table is the name of the side-effect table.
const Table = "applied"

// Schemas of Table: with (topic_incarnation, log_offset) as primary key
// (dedup) and without any key (the negative control). An offset alone does
// not name a message for good: a topic deleted and created again starts
// at offset 0 again, under a new incarnation id (the fetch answer's
// "incarnation"), so the key pairs the two. The two schemas differ only in
// the key, and the two inserts only in what a conflict on it does.
const (
	schemaDedup = `create table if not exists applied (
	topic_incarnation text   not null,
	log_offset        bigint not null,` + appliedColumns + `,
	primary key (topic_incarnation, log_offset))`
	schemaNoDedup = `create table if not exists applied (
	topic_incarnation text   not null,
	log_offset        bigint not null,` + appliedColumns + `)`
	// appliedColumns are the columns after log_offset, the same in both.
	appliedColumns = `
	message_id text,
	topic      text,
	content    jsonb,
	applied_at timestamptz default now()`

	insertNoDedup = `insert into applied (topic_incarnation, log_offset, message_id, topic, content)
	values ($1, $2, $3, $4, $5::jsonb)`
	insertDedup = insertNoDedup + ` on conflict (topic_incarnation, log_offset) do nothing`

	// migrateHint turns a table of the earlier schema (log_offset alone as
	// its key) into this one; its rows keep an empty incarnation.
	migrateHint = `alter table applied add column topic_incarnation text not null default ''; ` +
		`alter table applied drop constraint applied_pkey; alter table applied add primary key (topic_incarnation, log_offset)`
)

// Store applies deliveries to the applied table over one connection.
type Store struct {
	conn    *pgx.Conn
	noDedup bool
}

// OpenStore connects to dsn and creates the applied table when it is missing.
// An existing table must match the mode: a primary key on log_offset for
// dedup, none for noDedup (the control needs its own database or a dropped
// table, otherwise its plain inserts would fail on the key).
func OpenStore(ctx context.Context, dsn string, noDedup bool) (*Store, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("postgres: connect: %w", err)
	}
	s := &Store{conn: conn, noDedup: noDedup}
	if err := s.ensureSchema(ctx); err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	return s, nil
}

func (s *Store) ensureSchema(ctx context.Context) error {
	ddl := schemaDedup
	if s.noDedup {
		ddl = schemaNoDedup
	}
	if _, err := s.conn.Exec(ctx, ddl); err != nil {
		return fmt.Errorf("postgres: create table %s: %w", Table, err)
	}
	var hasPK, hasIncarnation bool
	err := s.conn.QueryRow(ctx, `select exists (
		select 1 from pg_index where indrelid = to_regclass($1) and indisprimary),
		exists (select 1 from information_schema.columns where table_name = $1 and column_name = 'topic_incarnation')`,
		Table).Scan(&hasPK, &hasIncarnation)
	if err != nil {
		return fmt.Errorf("postgres: inspect table %s: %w", Table, err)
	}
	if !hasIncarnation {
		return fmt.Errorf("postgres: table %s has no topic_incarnation column (made by an earlier version, which deduplicated by offset alone); migrate it with: %s", Table, migrateHint)
	}
	switch {
	case s.noDedup && hasPK:
		return fmt.Errorf("postgres: table %s has a primary key, but -no-dedup needs a table without one (use another database or drop the table)", Table)
	case !s.noDedup && !hasPK:
		return fmt.Errorf("postgres: table %s has no primary key (left by a -no-dedup run?); dedup needs (topic_incarnation, log_offset) as primary key (use another database or drop the table)", Table)
	}
	return nil
}

// Apply writes one delivery of the topic incarnation incarnation (the
// fetch answer's; "" from a broker without incarnation ids). It reports
// false when that (incarnation, offset) was already applied (dedup mode, 0
// rows affected): a redelivered duplicate. In noDedup mode every call
// inserts a row.
func (s *Store) Apply(ctx context.Context, topic, incarnation string, d Delivery) (inserted bool, err error) {
	q := insertDedup
	if s.noDedup {
		q = insertNoDedup
	}
	var content any // SQL NULL when the message has no content field
	if len(d.Message.Content) > 0 {
		content = string(d.Message.Content)
	}
	if d.Message.Topic.Name != "" {
		topic = d.Message.Topic.Name
	}
	tag, err := s.conn.Exec(ctx, q, incarnation, d.Offset, d.Message.ID, topic, content)
	if err != nil {
		return false, fmt.Errorf("postgres: apply offset %d: %w", d.Offset, err)
	}
	return tag.RowsAffected() == 1, nil
}

// Counts returns the number of rows and of distinct (incarnation, offset)
// pairs in the table.
func (s *Store) Counts(ctx context.Context) (rows, distinctOffsets int64, err error) {
	err = s.conn.QueryRow(ctx, `select count(*), count(distinct (topic_incarnation, log_offset)) from applied`).Scan(&rows, &distinctOffsets)
	if err != nil {
		return 0, 0, fmt.Errorf("postgres: count rows: %w", err)
	}
	return rows, distinctOffsets, nil
}

// Close closes the connection.
func (s *Store) Close(ctx context.Context) error { return s.conn.Close(ctx) }
