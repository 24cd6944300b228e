package console

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRevocationList(t *testing.T) {
	t.Parallel()
	now := time.Now()

	t.Run("a revoked session is refused until it expires, and then leaves the list", func(t *testing.T) {
		t.Parallel()
		s, err := newSessions(10)
		require.NoError(t, err)
		short, long := s.issue("op", now.Add(time.Minute)), s.issue("op", now.Add(SessionTTL))
		require.NoError(t, s.revoke(short, now))
		require.NoError(t, s.revoke(long, now))
		require.False(t, s.valid(short, now))
		require.False(t, s.valid(long, now))
		require.Len(t, s.revoked, 2)
		later := now.Add(2 * time.Minute)
		require.NoError(t, s.revoke(s.issue("op", later.Add(time.Minute)), later))
		require.Len(t, s.revoked, 2, "the expired one left, the new one came")
		require.False(t, s.valid(long, later), "the unexpired one is still refused")
	})

	t.Run("a full list replaces the key: every session ends, none revoked comes back", func(t *testing.T) {
		t.Parallel()
		s, err := newSessions(3)
		require.NoError(t, err)
		var revoked []string
		for range 3 {
			v := s.issue("op", now.Add(SessionTTL))
			require.NoError(t, s.revoke(v, now))
			revoked = append(revoked, v)
		}
		open := s.issue("other", now.Add(SessionTTL))
		fourth := s.issue("op", now.Add(SessionTTL))
		require.True(t, s.valid(open, now))
		require.NoError(t, s.revoke(fourth, now))
		for _, v := range append(revoked, fourth, open) {
			require.False(t, s.valid(v, now))
		}
		require.Empty(t, s.revoked)
		require.True(t, s.valid(s.issue("op", now.Add(SessionTTL)), now), "signing in again works")
	})

	t.Run("revoking what is not a live session changes nothing", func(t *testing.T) {
		t.Parallel()
		s, err := newSessions(1)
		require.NoError(t, err)
		open := s.issue("op", now.Add(SessionTTL))
		for _, v := range []string{"", "9999999999.aWQ.b3A.forged", s.issue("op", now.Add(-time.Second))} {
			require.NoError(t, s.revoke(v, now))
		}
		require.Empty(t, s.revoked)
		require.True(t, s.valid(open, now))
	})
}
