package sitting

import (
	"strings"
	"testing"
	"time"

	"github.com/acme/outboxpair/infra/outbox"
)

func TestRelayConfig(t *testing.T) {
	t.Parallel()
	none := func(string) (string, bool) { return "", false }
	t.Run("defaults are the binaries': OUTBOX_NOTIFY on and OUTBOX_WORKERS", func(t *testing.T) {
		t.Parallel()
		c, err := relayConfig(none, "")
		if err != nil {
			t.Fatal(err)
		}
		if !c.Notify || c.Workers != outbox.DefaultWorkers || c.ClaimSize <= 0 || c.Lease <= 0 || c.MaxAttempts <= 0 {
			t.Fatalf("not the binaries' defaults: %+v", c)
		}
	})
	t.Run("the environment the binaries inherit sets the in-process relay too", func(t *testing.T) {
		t.Parallel()
		c, err := relayConfig(func(name string) (string, bool) {
			switch name {
			case "OUTBOX_NOTIFY":
				return "false", true
			case "OUTBOX_WORKERS":
				return "7", true
			}
			return "", false
		}, "")
		if err != nil {
			t.Fatal(err)
		}
		if c.Notify || c.Workers != 7 {
			t.Fatalf("environment not applied: %+v", c)
		}
	})
	t.Run("a bad variable is an error naming it", func(t *testing.T) {
		t.Parallel()
		_, err := relayConfig(func(name string) (string, bool) { return "many", name == "OUTBOX_WORKERS" }, "")
		if err == nil || !strings.Contains(err.Error(), "OUTBOX_WORKERS") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("fields are set by name", func(t *testing.T) {
		t.Parallel()
		c, err := relayConfig(none, "ClaimSize=5, PollInterval=250ms")
		if err != nil {
			t.Fatal(err)
		}
		if c.ClaimSize != 5 || c.PollInterval != 250*time.Millisecond {
			t.Fatalf("not applied: %+v", c)
		}
	})
	t.Run("an unknown field is an error naming it", func(t *testing.T) {
		t.Parallel()
		_, err := relayConfig(none, "NoSuchField=1")
		if err == nil || !strings.Contains(err.Error(), "NoSuchField") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("a bad value is an error", func(t *testing.T) {
		t.Parallel()
		if _, err := relayConfig(none, "ClaimSize=ten"); err == nil {
			t.Fatal("no error")
		}
	})
}

func TestLoopbackOnly(t *testing.T) {
	t.Parallel()
	for url, ok := range map[string]bool{
		"postgres://postgres@127.0.0.1:5432/postgres": true,
		"postgres://postgres@localhost/postgres":      true,
		"postgres://postgres@db.example.com/postgres": false,
		"postgres://postgres@10.0.0.5/postgres":       false,
	} {
		if err := loopbackOnly(url); (err == nil) != ok {
			t.Errorf("loopbackOnly(%s) = %v", url, err)
		}
	}
}
