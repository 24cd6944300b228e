package stream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

var (
	pendingGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "nats_consumer_pending_messages",
		Help: "Messages of the stream a durable consumer has not acked or terminated yet (not yet delivered plus delivered and unacked), read from the server every GaugeEvery.",
	}, []string{"consumer"})
	oldestGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "nats_consumer_oldest_unacked_age_seconds",
		Help: "Age of the oldest message a durable consumer has not acked or terminated (the first after its ack floor); 0 when nothing is pending. Alert when it grows past the delay the consumer's service may lag.",
	}, []string{"consumer"})
	gaugeReads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nats_consumer_gauge_reads_total",
		Help: "Reads of the backlog gauges from the server, by consumer and outcome (ok, failed: the gauges keep their last values).",
	}, []string{"consumer", "outcome"})
)

func init() { prometheus.MustRegister(pendingGauge, oldestGauge, gaugeReads) }

// gaugeLoop reads the consumer's backlog from the server every GaugeEvery, so
// that what billing has not applied yet is visible before anything is at risk.
func (c *Consumer) gaugeLoop(ctx context.Context, nc *nats.Conn, js jetstream.JetStream) {
	defer close(c.gauges)
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := c.readGauges(cctx, nc, js)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			gaugeReads.WithLabelValues(c.cfg.Durable, "failed").Inc()
			c.logger.Debug("nats consumer gauges not read", "err", err.Error())
		} else {
			gaugeReads.WithLabelValues(c.cfg.Durable, "ok").Inc()
		}
		if !sleep(ctx, c.cfg.GaugeEvery) {
			return
		}
	}
}

func (c *Consumer) readGauges(ctx context.Context, nc *nats.Conn, js jetstream.JetStream) error {
	cons, err := js.Consumer(ctx, Name, c.cfg.Durable)
	if err != nil {
		return err
	}
	info := cons.CachedInfo()
	pending := info.NumPending + uint64(info.NumAckPending)
	age := 0.0
	if pending > 0 {
		stored, err := storedAfter(ctx, nc, info.AckFloor.Stream)
		if err != nil {
			return err
		}
		age = max(time.Since(stored).Seconds(), 0)
	}
	pendingGauge.WithLabelValues(c.cfg.Durable).Set(float64(pending))
	oldestGauge.WithLabelValues(c.cfg.Durable).Set(age)
	return nil
}

// storedAfter is when the first message after stream sequence floor was stored.
// It asks the stream's message API directly, which needs only that subject's
// permission, not the stream's info.
func storedAfter(ctx context.Context, nc *nats.Conn, floor uint64) (time.Time, error) {
	req, err := json.Marshal(map[string]any{"seq": floor + 1, "next_by_subj": Subjects})
	if err != nil {
		return time.Time{}, err
	}
	msg, err := nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+Name, req)
	if err != nil {
		return time.Time{}, err
	}
	var resp struct {
		Message *struct {
			Time time.Time `json:"time"`
		} `json:"message"`
		Error *struct {
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return time.Time{}, fmt.Errorf("stream message get: %w", err)
	}
	if resp.Error != nil {
		return time.Time{}, errors.New("stream message get: " + resp.Error.Description)
	}
	if resp.Message == nil {
		return time.Time{}, errors.New("stream message get: empty answer")
	}
	return resp.Message.Time, nil
}
