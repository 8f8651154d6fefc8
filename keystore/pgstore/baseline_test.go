package pgstore

// The store's earlier Update, kept in the tests as the baseline the load
// run compares against (POPPY_PGSTORE_TEST_BASELINE=xact): a pooled
// connection holds a transaction-scoped advisory lock from the read,
// through fn (a token request), to the commit. It is what made the pool,
// not the number of Users, the limit of a replica: see TestReplicaLoad.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/poppyproto/poppy/keystore"
)

// XactStore is s with the earlier Update.
type XactStore struct{ *Store }

// Update locks key with pg_advisory_xact_lock on a pooled connection and
// holds it, and the connection, while fn runs.
func (s XactStore) Update(ctx context.Context, key keystore.Key, fn func(current []byte) ([]byte, error)) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if err := s.migrate(ctx); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("pgstore: update %s: %w", key, err)
	}
	defer conn.Release()
	inTx := false
	defer func() {
		if inTx {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), writeTimeout)
			conn.Exec(rctx, "ROLLBACK")
			cancel()
		}
	}()
	args := []any{string(key.Kind), key.User, key.Issuer, key.ID}
	var b pgx.Batch
	b.Queue("BEGIN")
	b.Queue(`SELECT pg_advisory_xact_lock($1)`, s.lockID(args[0].(string), key.User, key.Issuer, key.ID))
	b.Queue(s.q.get, args...)
	inTx = true
	br := conn.SendBatch(ctx, &b)
	var stored []byte
	existed := true
	_, err = br.Exec()
	if err == nil {
		_, err = br.Exec()
	}
	if err == nil {
		err = br.QueryRow().Scan(&stored)
		if errors.Is(err, pgx.ErrNoRows) {
			existed, err = false, nil
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("pgstore: update %s: lock and read: %w", key, err)
	}
	var current []byte
	if existed {
		if current, err = keystore.OpenValue(s.sealer, key, stored); err != nil {
			return err
		}
	}
	s.stats.updates.Add(1)
	next, err := fn(current)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), writeTimeout)
	defer cancel()
	b = pgx.Batch{}
	switch {
	case next == nil && !existed:
	case next == nil:
		b.Queue(s.q.delete, args...)
	default:
		sealed, err := keystore.SealValue(s.sealer, key, next)
		if err != nil {
			return err
		}
		b.Queue(s.q.upsert, append(args, sealed)...)
	}
	b.Queue("COMMIT")
	br = conn.SendBatch(wctx, &b)
	for range b.Len() - 1 {
		if _, err = br.Exec(); err != nil {
			break
		}
	}
	if err == nil {
		var tag pgconn.CommandTag
		if tag, err = br.Exec(); err == nil && tag.String() != "COMMIT" {
			err = errors.New("transaction rolled back")
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("pgstore: update %s: write: %w", key, err)
	}
	inTx = false
	return nil
}

// PoolWriteStore is s with the Update of the store before its writes went
// on the lock connection (POPPY_PGSTORE_TEST_BASELINE=pool): the lock and
// the read on the lock connection, fn, then the write on a pooled
// connection, then the release in another round trip on the lock
// connection. A replica killed while the write waits for a pooled
// connection loses what fn returned: see TestReplicaLoad.
type PoolWriteStore struct{ *Store }

// Update is the earlier Update, line for line but for the figures it
// counts (Stats.Writes, the write hook), which it counts as Store.Update
// does: from fn's return to the write's commit.
func (s PoolWriteStore) Update(ctx context.Context, key keystore.Key, fn func(current []byte) ([]byte, error)) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if err := s.migrate(ctx); err != nil {
		return err
	}
	unlockLocal, err := s.local.Lock(ctx, key)
	if err != nil {
		return err
	}
	defer unlockLocal()
	id := s.lockID(string(key.Kind), key.User, key.Issuer, key.ID)
	lc := s.lockConns[uint64(id)%uint64(len(s.lockConns))]
	stored, existed, err := s.lock(ctx, lc, id, keyParams(key))
	if err != nil {
		return fmt.Errorf("pgstore: update %s: lock and read: %w", key, err)
	}
	defer lc.unlock(id)
	var current []byte
	if existed {
		if current, err = keystore.OpenValue(s.sealer, key, stored); err != nil {
			return fmt.Errorf("pgstore: update: %w", err)
		}
	}
	s.stats.updates.Add(1)
	next, err := fn(current)
	if err != nil {
		return err
	}
	if next == nil && !existed || next != nil && existed && bytes.Equal(next, current) {
		s.stats.unchanged.Add(1)
		return nil
	}
	t0 := time.Now()
	var sealed []byte
	if next != nil {
		if sealed, err = keystore.SealValue(s.sealer, key, next); err != nil {
			return fmt.Errorf("pgstore: update %s: seal: %w", key, err)
		}
	}
	if err := s.poolWrite(ctx, key, sealed, next == nil); err != nil {
		return fmt.Errorf("pgstore: update %s: write: %w", key, err)
	}
	s.wrote(key, time.Since(t0))
	return nil
}

// SetWriteHook has s tell f of each write and its time from fn's return
// to the commit. Call it before any Update.
func SetWriteHook(s *Store, f func(keystore.Key, time.Duration)) { s.writeHook = f }
