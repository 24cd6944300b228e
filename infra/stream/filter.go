package stream

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// A durable's filter: the subjects labeling.events.<Type> of the types its
// service handles, so a type it does not handle never reaches it and the
// interest stream keeps no message for it that it would only nak (contract
// section 7, docs/nats.md "Filters").
//
// NATS 2.10 added FilterSubjects, several subjects a durable; 2.9 has only
// FilterSubject, one. A server before 2.10 that is sent FilterSubjects
// ignores them and creates a durable that takes every subject (nats.go then
// reports ErrConsumerMultipleFilterSubjectsNotSupported, after the fact), so
// the server's version decides what is sent, and the filter the server applied
// is read back from its answer. NATS 2.9 also handles a filter update badly: a
// durable whose filter is changed skips the messages stored in the stream
// meanwhile (nats-server 2.9.10, TestFilterUpdate), so on 2.9 an existing
// durable keeps the filter it has.

// Filter is the filter a durable of types gets on a server of version (as
// nats.Conn.ConnectedServerVersion reports it): every subject (Subjects) when
// types is empty; Subject(t) for one type; on NATS 2.10 or later one subject
// a type. Before 2.10, several types cannot be narrowed to one subject: the
// filter is Subjects and narrowed is false.
func Filter(types []string, version string) (subjects []string, narrowed bool) {
	switch {
	case len(types) == 0:
		return []string{Subjects}, true
	case len(types) == 1:
		return []string{Subject(types[0])}, true
	case !MultipleFilters(version):
		return []string{Subjects}, false
	}
	out := make([]string, 0, len(types))
	for _, t := range types {
		out = append(out, Subject(t))
	}
	slices.Sort(out)
	return slices.Compact(out), true
}

// MultipleFilters reports whether a server of version (major.minor.patch)
// takes FilterSubjects: NATS 2.10 or later. An empty or unreadable version
// (not connected) is taken as an old server: the filter sent is then one the
// old and the new both apply as sent.
func MultipleFilters(version string) bool {
	var major, minor int
	if _, err := fmt.Sscanf(strings.TrimPrefix(version, "v"), "%d.%d", &major, &minor); err != nil {
		return false
	}
	return major > 2 || major == 2 && minor >= 10
}

// withFilter sets subjects as cfg's filter: one in FilterSubject (which every
// server version applies), several in FilterSubjects.
func withFilter(cfg jetstream.ConsumerConfig, subjects []string) jetstream.ConsumerConfig {
	cfg.FilterSubject, cfg.FilterSubjects = "", nil
	if len(subjects) == 1 {
		cfg.FilterSubject = subjects[0]
	} else {
		cfg.FilterSubjects = slices.Clone(subjects)
	}
	return cfg
}

// Applied is the filter of a durable as the server reports it (its
// ConsumerInfo's Config): FilterSubjects, or FilterSubject, or Subjects for a
// durable without a filter, which takes every subject of the stream.
func Applied(cfg jetstream.ConsumerConfig) []string {
	switch {
	case len(cfg.FilterSubjects) > 0:
		return slices.Sorted(slices.Values(cfg.FilterSubjects))
	case cfg.FilterSubject != "":
		return []string{cfg.FilterSubject}
	}
	return []string{Subjects}
}

// Takes reports whether a durable of cfg (as the server reports it) takes
// subject: whether one of its filter's subjects matches it.
func Takes(cfg jetstream.ConsumerConfig, subject string) bool {
	for _, f := range Applied(cfg) {
		if subjectMatches(f, subject) {
			return true
		}
	}
	return false
}

// subjectMatches reports whether the NATS subject filter f (with * for one
// token, > for the rest) matches subject.
func subjectMatches(f, subject string) bool {
	ft, st := strings.Split(f, "."), strings.Split(subject, ".")
	for i, tok := range ft {
		switch {
		case tok == ">":
			return len(st) > i
		case i >= len(st):
			return false
		case tok != "*" && tok != st[i]:
			return false
		}
	}
	return len(ft) == len(st)
}

// filterNote is why what a consumer sends is not the filter its types ask
// for; keep is an existing durable's filter kept, which an operator may want
// to change (a warning), and otherwise several types could not be narrowed
// (the consumer skips the others itself: information).
type filterNote struct {
	msg  string
	keep bool
}

// durableConfig is the configuration to create or update the durable of cfg
// with on a server of version, and a note for the log when what is sent is
// not the filter cfg.Types asks for: several types on a server before 2.10
// (no narrowing), or, before 2.10, an existing durable whose filter is kept.
func durableConfig(ctx context.Context, js jetstream.JetStream, cfg ConsumerConfig, version string) (jetstream.ConsumerConfig, filterNote, error) {
	want, narrowed := Filter(cfg.Types, version)
	jc := withFilter(cfg.JetStreamConfig(), want)
	if MultipleFilters(version) {
		return jc, filterNote{}, nil
	}
	var note filterNote
	if !narrowed {
		note.msg = fmt.Sprintf("NATS %s has no FilterSubjects (2.10 and later): a durable of several types takes every subject, "+
			"and the consumer acks the types it does not handle without handling them", version)
	}
	c, err := js.Consumer(ctx, Name, cfg.Durable)
	switch {
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		return jc, note, nil
	case err != nil:
		return jetstream.ConsumerConfig{}, filterNote{}, err
	}
	have := Applied(c.CachedInfo().Config)
	if !slices.Equal(have, want) {
		note.keep = true
		note.msg = fmt.Sprintf("NATS %s: the durable keeps its filter %s, not %s: a filter update on 2.9 makes it skip the messages "+
			"the stream holds; to change it, wait until it has nothing pending, delete it (nats consumer rm %s %s) and start the consumer again",
			version, strings.Join(have, ","), strings.Join(want, ","), Name, cfg.Durable)
	}
	// As the server has it, to the byte: "" and Subjects take the same
	// messages, yet changing one for the other is an update 2.9 mishandles.
	jc.FilterSubject, jc.FilterSubjects = c.CachedInfo().Config.FilterSubject, c.CachedInfo().Config.FilterSubjects
	return jc, note, nil
}
