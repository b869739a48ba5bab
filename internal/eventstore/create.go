package eventstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Creation of the streams and buckets on a cluster that is starting.
//
// A request about a replicated stream whose group has not elected its leader
// yet (just created, by this process or another one starting at the same
// moment) is answered by no server: the client waits out its whole deadline.
// So is, at times, a create that races another process's create of the same
// stream. Each request therefore gets a short deadline of its own and is
// retried at once, reading the stream again, until the caller's context ends.
const (
	// createAttemptTimeout bounds the first request of each kind; each
	// retry allows createAttemptStep more, up to createAttemptMax, for a
	// machine too slow to answer within the first.
	createAttemptTimeout = time.Second
	createAttemptStep    = time.Second
	createAttemptMax     = 5 * time.Second
	// createPause is the pause after the first failed attempt; it doubles
	// with each failure up to createPauseMax.
	createPause    = 100 * time.Millisecond
	createPauseMax = time.Second
)

// errNoLeaderYet reports a replicated stream whose group has not elected its
// leader yet: an update sent to it now would wait for the election.
var errNoLeaderYet = errors.New("no stream leader elected yet")

// ensure creates or updates the stream named stream (a bucket's stream for a
// bucket) through put, given the replicas to ask for: want, or more when the
// stream exists with more, so that it never lowers an existing stream's
// replicas. It retries while JetStream cannot answer yet (a request
// unanswered within its short deadline, no leader elected, the cluster not
// available, the same stream created concurrently with another
// configuration, which is then read again) and returns the last error once
// ctx ends. Any other error is returned at once.
func ensure[T any](ctx context.Context, js jetstream.JetStream, stream string, want int, put func(ctx context.Context, replicas int) (T, error)) (T, error) {
	timeout, pause := createAttemptTimeout, createPause
	for {
		v, err := ensureOnce(ctx, timeout, js, stream, want, put)
		if err == nil {
			return v, nil
		}
		if ctx.Err() != nil || !transient(err) {
			return v, err
		}
		select {
		case <-time.After(pause):
		case <-ctx.Done():
			return v, err
		}
		timeout = min(timeout+createAttemptStep, createAttemptMax)
		pause = min(2*pause, createPauseMax)
	}
}

// ensureOnce makes one attempt of ensure, each request bounded by timeout.
func ensureOnce[T any](ctx context.Context, timeout time.Duration, js jetstream.JetStream, stream string, want int, put func(ctx context.Context, replicas int) (T, error)) (T, error) {
	var zero T
	replicas := want
	info, err := streamInfo(ctx, timeout, js, stream)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
	case err != nil:
		return zero, err
	default:
		replicas = max(want, info.Config.Replicas)
		if info.Config.Replicas > 1 && (info.Cluster == nil || info.Cluster.Leader == "") {
			return zero, errNoLeaderYet
		}
	}
	reqCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return put(reqCtx, replicas)
}

func streamInfo(ctx context.Context, timeout time.Duration, js jetstream.JetStream, stream string) (*jetstream.StreamInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, err
	}
	return st.CachedInfo(), nil
}

// transient reports whether err may pass on its own while a cluster starts.
func transient(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, errNoLeaderYet) ||
		errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) || errors.Is(err, jetstream.ErrBucketExists) {
		return true
	}
	var apiErr *jetstream.APIError
	// 503: JetStream, the cluster or the stream is not available yet.
	return errors.As(err, &apiErr) && (apiErr.Code == 503 || apiErr.ErrorCode == jetstream.JSErrCodeStreamNameInUse)
}

// ensureStream creates or updates the stream of cfg, as ensure does.
func ensureStream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	st, err := ensure(ctx, js, cfg.Name, cfg.Replicas, func(ctx context.Context, replicas int) (jetstream.Stream, error) {
		cfg.Replicas = replicas
		return js.CreateOrUpdateStream(ctx, cfg)
	})
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", cfg.Name, err)
	}
	return st, nil
}

// ensureBucket creates or updates the bucket of cfg, as ensure does.
func ensureBucket(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	kv, err := ensure(ctx, js, "KV_"+cfg.Bucket, cfg.Replicas, func(ctx context.Context, replicas int) (jetstream.KeyValue, error) {
		cfg.Replicas = replicas
		return js.CreateOrUpdateKeyValue(ctx, cfg)
	})
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", cfg.Bucket, err)
	}
	return kv, nil
}
