// Command natsfsync measures the broker alone, with no outbox and no billing:
// how many messages a private nats-server stores, or stores and removes, a
// second on an interest stream like LABELING_EVENTS, with sync_interval:
// always or the default, for publishers that wait for each ack (any number
// at once), publishers that keep many unacked (async), and with a consumer-
// info read after each ack as labeling's check of the durables made before
// issue 36. It is the ceiling the project's NATS drain cannot pass whatever
// its clients do (bench/results/2026-12-04.md).
//
//	cd bench && go run ./natsfsync -nats-server /tmp/nats-server-2.12 -drain -publishers 40
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func main() {
	bin := flag.String("nats-server", "nats-server", "the nats-server binary to start (2.10 or later for -sync-always)")
	n := flag.Int("n", 4000, "messages")
	publishers := flag.Int("publishers", 40, "publishers at once, each waiting for its ack")
	async := flag.Int("async", 0, "instead: one async publisher with at most this many unacked")
	always := flag.Bool("sync-always", true, "the server with sync_interval: always")
	drain := flag.Bool("drain", true, "a consumer acks every message, so the stream removes it (interest retention); the time ends when the stream is empty")
	durableRead := flag.Bool("durable-read", false, "a consumer-info read after each ack (labeling's check before issue 36)")
	flag.Parse()
	if err := run(*bin, *n, *publishers, *async, *always, *drain, *durableRead); err != nil {
		log.Fatal(err)
	}
}

func run(bin string, n, publishers, async int, always, drain, durableRead bool) error {
	dir, err := os.MkdirTemp("", "natsfsync")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	conf := "port: " + strconv.Itoa(port) + "\njetstream {\n  store_dir: " + strconv.Quote(filepath.Join(dir, "js")) + "\n"
	if always {
		conf += "  sync_interval: always\n"
	}
	conf += "}\n"
	if err := os.WriteFile(filepath.Join(dir, "nats.conf"), []byte(conf), 0o600); err != nil {
		return err
	}
	srv := exec.Command(bin, "-a", "127.0.0.1", "-c", filepath.Join(dir, "nats.conf"))
	if err := srv.Start(); err != nil {
		return err
	}
	defer func() { _ = srv.Process.Kill(); _ = srv.Wait() }()
	var nc *nats.Conn
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if nc, err = nats.Connect("nats://127.0.0.1:" + strconv.Itoa(port)); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(max(async, 1)))
	if err != nil {
		return err
	}
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"},
		Storage: jetstream.FileStorage, Retention: jetstream.InterestPolicy}); err != nil {
		return err
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, "S", jetstream.ConsumerConfig{Durable: "d", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		return err
	}
	acked := make(chan error, 1)
	if drain {
		go func() {
			it, err := cons.Messages(jetstream.PullMaxMessages(256))
			if err != nil {
				acked <- err
				return
			}
			defer it.Stop()
			for range n {
				m, err := it.Next()
				if err != nil {
					acked <- err
					return
				}
				_ = m.Ack()
			}
			acked <- nil
		}()
	}
	body := make([]byte, 400) // about an envelope's size
	msg := func(id string) *nats.Msg {
		return &nats.Msg{Subject: "s.x", Data: body, Header: nats.Header{nats.MsgIdHdr: []string{id}}}
	}
	start := time.Now()
	if async > 0 {
		futures := make([]jetstream.PubAckFuture, 0, n)
		for i := range n {
			f, err := js.PublishMsgAsync(msg(strconv.Itoa(i)), jetstream.WithStallWait(time.Minute))
			if err != nil {
				return err
			}
			futures = append(futures, f)
		}
		for _, f := range futures {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				return err
			}
		}
	} else {
		var wg sync.WaitGroup
		errs := make(chan error, publishers)
		for w := range publishers {
			wg.Go(func() {
				for i := w; i < n; i += publishers {
					if _, err := js.PublishMsg(ctx, msg(strconv.Itoa(i))); err != nil {
						errs <- err
						return
					}
					if durableRead {
						if _, err := js.Consumer(ctx, "S", "d"); err != nil {
							errs <- err
							return
						}
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			return err
		}
	}
	published := time.Since(start)
	if drain {
		if err := <-acked; err != nil {
			return err
		}
		for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(5 * time.Millisecond) {
			st, err := js.Stream(ctx, "S")
			if err != nil {
				return err
			}
			if st.CachedInfo().State.Msgs == 0 {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%d messages still in the stream after 5m", st.CachedInfo().State.Msgs)
			}
		}
	}
	total := time.Since(start)
	fmt.Printf("sync-always=%t drain=%t publishers=%d async=%d durable-read=%t n=%d: published %.0f/s, done %.0f/s\n",
		always, drain, publishers, async, durableRead, n, float64(n)/published.Seconds(), float64(n)/total.Seconds())
	return nil
}
