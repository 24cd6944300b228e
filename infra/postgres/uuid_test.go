package postgres_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/postgres"
	"github.com/acme/outboxpair/internal/testsupport/pgtest"
)

// TestUUIDBinary checks that a pool of Open sends and reads uuid.UUID as the
// same values the text round trip gave, NULL included.
func TestUUIDBinary(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := postgres.Open(ctx, pgtest.ServerURL(t))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	a, b := uuid.New(), uuid.New()

	t.Run("ids and arrays of ids round-trip unchanged", func(t *testing.T) {
		t.Parallel()
		var one uuid.UUID
		var text string
		require.NoError(t, pool.QueryRow(ctx, `SELECT $1::uuid, $1::uuid::text`, a).Scan(&one, &text))
		require.Equal(t, a, one)
		require.Equal(t, a.String(), text)
		var many []uuid.UUID
		require.NoError(t, pool.QueryRow(ctx, `SELECT $1::uuid[]`, []uuid.UUID{a, b}).Scan(&many))
		require.Equal(t, []uuid.UUID{a, b}, many)
		var texts []string
		require.NoError(t, pool.QueryRow(ctx, `SELECT array(SELECT x::text FROM unnest($1::uuid[]) AS x)`, []uuid.UUID{a, b}).Scan(&texts))
		require.Equal(t, []string{a.String(), b.String()}, texts)
	})

	t.Run("NULL is sent for a nil pointer and leaves a target unchanged", func(t *testing.T) {
		t.Parallel()
		var isNull bool
		require.NoError(t, pool.QueryRow(ctx, `SELECT $1::uuid IS NULL`, (*uuid.UUID)(nil)).Scan(&isNull))
		require.True(t, isNull)
		got := b
		require.NoError(t, pool.QueryRow(ctx, `SELECT NULL::uuid`).Scan(&got))
		require.Equal(t, b, got)
		var ptr *uuid.UUID
		require.NoError(t, pool.QueryRow(ctx, `SELECT NULL::uuid`).Scan(&ptr))
		require.Nil(t, ptr)
	})

	t.Run("the bytes sent are those of the text round trip", func(t *testing.T) {
		t.Parallel()
		registered := pgtype.NewMap()
		postgres.RegisterUUID(registered)
		for _, v := range []any{a, []uuid.UUID{a, b}} {
			oid := uint32(pgtype.UUIDOID)
			if _, ok := v.([]uuid.UUID); ok {
				oid = pgtype.UUIDArrayOID
			}
			want, err := pgtype.NewMap().Encode(oid, pgtype.BinaryFormatCode, v, nil)
			require.NoError(t, err)
			got, err := registered.Encode(oid, pgtype.BinaryFormatCode, v, nil)
			require.NoError(t, err)
			require.Equal(t, want, got)
		}
	})
}
