// Package stopbudget divides a process's stop into shares. Each component
// that stops (has an fx OnStop hook) declares its share, the longest its
// hooks may take together; the app's stop budget is the sum of the shares,
// computed, never written by hand (infra/service.Run); and each hook is cut
// off at the end of what is left of its share, so a component that hangs
// cannot starve the ones that stop after it. Audit finds, in a test, a hook
// appended outside any share.
package stopbudget

import (
	"context"
	"fmt"
	"reflect"
	"runtime"
	"sync"
	"time"

	"go.uber.org/fx"
)

// Share is one step of the stop: Name's hooks take at most Timeout together.
type Share struct {
	Name    string
	Timeout time.Duration
}

// Group is the fx value group every declared Share is in (service.Run sums
// it): `group:"stop_shares"`.
const Group = `group:"stop_shares"`

// Total is the stop budget of an app whose components declared shares: their
// sum, so that each step gets its whole share even when every step before it
// used all of its own.
func Total(shares []Share) time.Duration {
	var total time.Duration
	for _, s := range shares {
		total += s.Timeout
	}
	return total
}

// Step is a declared share in a running app: what its hooks have used so far.
type Step struct {
	share Share
	mu    sync.Mutex
	used  time.Duration
}

// StepTag is the fx name tag of the *Step of the share named name, for a hook
// appended outside a Part (service.Run's server hook).
func StepTag(name string) string { return `name:"stop_share_` + name + `"` }

func lengthTag(name string) string { return `name:"stop_share_length_` + name + `"` }

// Declare provides the share named name, whose length the fx constructor
// length returns (a func with any dependencies, returning time.Duration): its
// *Step (StepTag) and its Share in Group. Module declares a fixed length.
func Declare(name string, length any) fx.Option {
	return fx.Options(
		fx.Provide(fx.Annotate(length, fx.ResultTags(lengthTag(name)))),
		fx.Provide(fx.Annotate(
			func(d time.Duration) (*Step, Share) {
				s := &Step{share: Share{Name: name, Timeout: d}}
				return s, s.share
			},
			fx.ParamTags(lengthTag(name)),
			fx.ResultTags(StepTag(name), Group),
		)),
	)
}

// Part groups opts in a module in which every OnStop hook counts against the
// share named name, declared elsewhere (Declare or Module): a component whose
// stop is part of another's step (the relay's transport in the relay's). In
// an app that declares no such share (a test that runs the component alone)
// the hooks are left as they are, and Audit reports them.
func Part(name string, opts ...fx.Option) fx.Option {
	return fx.Module(name+"-stop",
		fx.Decorate(fx.Annotate(
			func(lc fx.Lifecycle, s *Step) fx.Lifecycle {
				if s == nil {
					return lc
				}
				return bounded{lc: lc, step: s}
			},
			fx.ParamTags(``, StepTag(name)+` optional:"true"`),
		)),
		fx.Options(opts...),
	)
}

// Module declares s and groups opts in a module in which every OnStop hook
// counts against it: a component with a share of its own.
func Module(s Share, opts ...fx.Option) fx.Option {
	return fx.Options(
		Declare(s.Name, func() time.Duration { return s.Timeout }),
		Part(s.Name, opts...),
	)
}

type bounded struct {
	lc   fx.Lifecycle
	step *Step
}

func (b bounded) Append(h fx.Hook) {
	h.OnStop = b.step.Bound(h.OnStop)
	b.lc.Append(h)
}

// Bound returns stop bounded by what is left of the step's share when it
// runs (Within), and counts the time it took against the share, so the hooks
// of one step take no more than its share together. Nil stays nil.
//
// Never inlined: every function it returns is then the same code, by which
// Audit tells a hook that counts against a share.
//
//go:noinline
func (s *Step) Bound(stop func(context.Context) error) func(context.Context) error {
	if stop == nil {
		return nil
	}
	return func(ctx context.Context) error {
		s.mu.Lock()
		left := s.share.Timeout - s.used
		s.mu.Unlock()
		start := time.Now()
		err := Within(left, stop)(ctx)
		s.mu.Lock()
		s.used += time.Since(start)
		s.mu.Unlock()
		return err
	}
}

// boundPC is the code of every function Step.Bound returns (it is never
// inlined), by which Audit tells a hook that counts against a share.
var boundPC = reflect.ValueOf((&Step{}).Bound(func(context.Context) error { return nil })).Pointer()

// withinSlack is how much sooner than its share's end a stop's context ends
// (at most; a tenth of a short share).
const withinSlack = 100 * time.Millisecond

// Within returns stop bounded by d: its context ends d after the call (or when the
// caller's ends, if sooner), and it returns then even if stop has not: a
// component that overruns its share (blocked on an unreachable database, say)
// is left to finish in the background until the exit, with an error naming the
// share, so the steps after it still get theirs.
func Within(d time.Duration, stop func(context.Context) error) func(context.Context) error {
	if stop == nil {
		return nil
	}
	return func(ctx context.Context) error {
		hard, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		// stop's own deadline comes a moment before the share ends, so a stop
		// that honours it returns its own answer (nil after a clean give-up)
		// rather than being cut off.
		deadline, _ := hard.Deadline()
		soft, cancelSoft := context.WithDeadline(hard, deadline.Add(-min(d/10, withinSlack)))
		defer cancelSoft()
		done := make(chan error, 1)
		go func() { done <- stop(soft) }()
		select {
		case err := <-done:
			return err
		case <-hard.Done():
			select {
			case err := <-done: // returned at the deadline: its own answer counts
				return err
			default:
			}
			return fmt.Errorf("did not stop within its share of the stop budget (%s): %w", d, hard.Err())
		}
	}
}

// Audit returns an option for a test that builds an app: every OnStop hook
// appended outside a share (a component that stops without declaring its
// part of the budget) is reported to unbounded, by the name of its function.
// Put it in the app's root, beside the app's options.
func Audit(unbounded func(hook string)) fx.Option {
	return fx.Decorate(func(lc fx.Lifecycle) fx.Lifecycle { return audit{lc: lc, report: unbounded} })
}

type audit struct {
	lc     fx.Lifecycle
	report func(string)
}

func (a audit) Append(h fx.Hook) {
	if h.OnStop != nil {
		if pc := reflect.ValueOf(h.OnStop).Pointer(); pc != boundPC {
			name := "unknown"
			if f := runtime.FuncForPC(pc); f != nil {
				name = f.Name()
			}
			a.report(name)
		}
	}
	a.lc.Append(h)
}
