// Command natsrecords fills billing_nats_failed of a PostgreSQL database with
// n records whose Events-Signature verifies under -token, each a RuleActivated
// event of one of -orgs orgs, padded to about -size payload bytes, occurred
// now: what `billing nats replay --all` applies and the console lists, for
// the measurements of docs/nats.md (bench/natsrecords.sh). One COPY.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"log"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/acme/outboxpair/infra/stream"
)

func main() {
	url := flag.String("url", "", "the billing database (PostgreSQL)")
	n := flag.Int("n", 100_000, "records")
	size := flag.Int("size", 3000, "payload bytes, about")
	orgs := flag.Int("orgs", 1000, "orgs the events are spread over")
	token := flag.String("token", "bench-token", "EVENTS_TOKEN the signatures verify under")
	flag.Parse()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, *url)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close(ctx)
	orgIDs := make([]uuid.UUID, *orgs)
	for i := range orgIDs {
		orgIDs[i] = uuid.New()
	}
	pad := make([]byte, *size/2)
	const subject = "labeling.events.RuleActivated"
	now := time.Now()
	i := 0
	rows := pgx.CopyFromFunc(func() ([]any, error) {
		if i == *n {
			return nil, nil
		}
		i++
		id := uuid.Must(uuid.NewV7()).String()
		if _, err := rand.Read(pad); err != nil {
			return nil, err
		}
		body := fmt.Sprintf(`{"id":%q,"type":"RuleActivated","occurredAt":%d,"payload":{"orgId":%q,"ruleId":%q,"note":%q}}`,
			id, now.UnixMilli(), orgIDs[i%len(orgIDs)], uuid.New(), hex.EncodeToString(pad))
		sig := stream.Sign([]byte(*token), subject, id, []byte(body))
		return []any{int64(i), now.UnixNano(), []byte(subject), []byte(id), []byte(body),
			"signature invalid: under the token of then", int64(1), now.UnixMilli(), []byte(sig)}, nil
	})
	copied, err := conn.CopyFrom(ctx, pgx.Identifier{"billing_nats_failed"},
		[]string{"stream_seq", "stored_at", "subject", "msg_id", "payload", "reason", "deliveries", "failed_at", "signature"}, rows)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d records\n", copied)
}
