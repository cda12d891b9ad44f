package pgconsumer

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Table is the name of the side-effect table.
const Table = "applied"

// Schemas of Table: with the offset as primary key (dedup) and without any
// key (the negative control). The two differ only in the log_offset column,
// and the two inserts only in what a conflict on it does.
const (
	schemaDedup = `create table if not exists applied (
	log_offset bigint primary key,` + appliedColumns
	schemaNoDedup = `create table if not exists applied (
	log_offset bigint not null,` + appliedColumns
	// appliedColumns are the columns after log_offset, the same in both.
	appliedColumns = `
	message_id text,
	topic      text,
	content    jsonb,
	applied_at timestamptz default now())`

	insertNoDedup = `insert into applied (log_offset, message_id, topic, content)
	values ($1, $2, $3, $4::jsonb)`
	insertDedup = insertNoDedup + ` on conflict (log_offset) do nothing`
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
	var hasPK bool
	err := s.conn.QueryRow(ctx, `select exists (
		select 1 from pg_index where indrelid = to_regclass($1) and indisprimary)`, Table).Scan(&hasPK)
	if err != nil {
		return fmt.Errorf("postgres: inspect table %s: %w", Table, err)
	}
	switch {
	case s.noDedup && hasPK:
		return fmt.Errorf("postgres: table %s has a primary key, but -no-dedup needs a table without one (use another database or drop the table)", Table)
	case !s.noDedup && !hasPK:
		return fmt.Errorf("postgres: table %s has no primary key (left by a -no-dedup run?); dedup needs log_offset as primary key (use another database or drop the table)", Table)
	}
	return nil
}

// Apply writes one delivery. It reports false when the offset was already
// applied (dedup mode, 0 rows affected): a redelivered duplicate. In
// noDedup mode every call inserts a row.
func (s *Store) Apply(ctx context.Context, topic string, d Delivery) (inserted bool, err error) {
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
	tag, err := s.conn.Exec(ctx, q, d.Offset, d.Message.ID, topic, content)
	if err != nil {
		return false, fmt.Errorf("postgres: apply offset %d: %w", d.Offset, err)
	}
	return tag.RowsAffected() == 1, nil
}

// Counts returns the number of rows and of distinct offsets in the table.
func (s *Store) Counts(ctx context.Context) (rows, distinctOffsets int64, err error) {
	err = s.conn.QueryRow(ctx, `select count(*), count(distinct log_offset) from applied`).Scan(&rows, &distinctOffsets)
	if err != nil {
		return 0, 0, fmt.Errorf("postgres: count rows: %w", err)
	}
	return rows, distinctOffsets, nil
}

// Close closes the connection.
func (s *Store) Close(ctx context.Context) error { return s.conn.Close(ctx) }
