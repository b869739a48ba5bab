package eventstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// The file store: the events of uploaded files and their bytes.
const (
	// StreamFiles holds every event of every account's files:
	// ev.file.<account_id>.<event>. Its own stream, not ACCOUNTS: an upload
	// must not contend with the ledger's conditional appends on the
	// account's subjects, and an account's files are read without reading
	// its ledger.
	StreamFiles = "FILES"
	// ObjectsFiles is the Object Store bucket of the uploaded bytes and
	// their extracted text, by object name.
	ObjectsFiles = "files"
	// FilesTTL is how long the files bucket keeps an object.
	FilesTTL = 48 * time.Hour
	// FileEventsMaxAge is how long the FILES stream keeps an event: a day
	// past the life of the file it names, so that an expired file is still
	// told apart from an unknown one for a day, and what a file leaves
	// behind (deleted or not) goes with it. An event's bytes were kept
	// forever, an upload then its deletion's 1.5 KB each.
	FileEventsMaxAge = FilesTTL + 24*time.Hour
)

// Objects is an Object Store bucket of the store.
type Objects struct {
	name string
	obs  jetstream.ObjectStore
}

// ensureObjects creates or updates the object store of cfg, as ensure does.
func ensureObjects(ctx context.Context, js jetstream.JetStream, cfg jetstream.ObjectStoreConfig) (*Objects, error) {
	obs, err := ensure(ctx, js, "OBJ_"+cfg.Bucket, cfg.Replicas, func(ctx context.Context, replicas int) (jetstream.ObjectStore, error) {
		cfg.Replicas = replicas
		return js.CreateOrUpdateObjectStore(ctx, cfg)
	})
	if err != nil {
		return nil, fmt.Errorf("object store %s: %w", cfg.Bucket, err)
	}
	return &Objects{name: cfg.Bucket, obs: obs}, nil
}

// ObjectInfo is what the bucket knows of one object.
type ObjectInfo struct {
	Name     string
	Size     uint64
	Digest   string
	ModTime  time.Time
	Metadata map[string]string
}

func objectInfo(i *jetstream.ObjectInfo) ObjectInfo {
	return ObjectInfo{Name: i.Name, Size: i.Size, Digest: i.Digest, ModTime: i.ModTime, Metadata: i.Metadata}
}

// Put stores the bytes of r as the object name, in chunks, never holding
// them whole. When r fails, the chunks already sent are purged and r's
// error is returned unwrapped beside ErrUnavailable's absence, so a
// caller's own refusal (a size limit) reaches it as itself. An object
// whose Put did not finish is never visible: it has no info.
//
// A Put whose ctx ends (its client went away) still purges the chunks it
// stored: the object store's clean-up of a failed Put runs with the Put's
// context, so Put hands it one that is not cancelled with ctx, ending
// purgeRoom after ctx's deadline, if any. The Put itself stops when its
// reader fails, as a request's body does once its client is gone.
func (o *Objects) Put(ctx context.Context, name string, metadata map[string]string, r io.Reader) (ObjectInfo, error) {
	src := &trackedReader{r: r}
	putCtx := context.WithoutCancel(ctx)
	if d, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		putCtx, cancel = context.WithDeadline(putCtx, d.Add(purgeRoom))
		defer cancel()
	}
	info, err := o.obs.Put(putCtx, jetstream.ObjectMeta{Name: name, Metadata: metadata}, src)
	if err != nil {
		if src.err != nil {
			return ObjectInfo{}, src.err
		}
		return ObjectInfo{}, classify("put object", err)
	}
	return objectInfo(info), nil
}

// purgeRoom is how long after its context's deadline a failed Put may take
// to purge what it stored.
const purgeRoom = 10 * time.Second

// trackedReader remembers its source's error, other than io.EOF.
type trackedReader struct {
	r   io.Reader
	err error
}

func (t *trackedReader) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if err != nil && err != io.EOF {
		t.err = err
	}
	return n, err
}

// PutBytes stores data as the object name.
func (o *Objects) PutBytes(ctx context.Context, name string, metadata map[string]string, data []byte) error {
	_, err := o.obs.Put(ctx, jetstream.ObjectMeta{Name: name, Metadata: metadata}, bytesReader(data))
	if err != nil {
		return classify("put object", err)
	}
	return nil
}

// Info returns the object's info, or ErrNotFound when it is absent or
// deleted.
func (o *Objects) Info(ctx context.Context, name string) (ObjectInfo, error) {
	info, err := o.obs.GetInfo(ctx, name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return ObjectInfo{}, fmt.Errorf("object info: %w", ErrNotFound)
	}
	if err != nil {
		return ObjectInfo{}, classify("object info", err)
	}
	return objectInfo(info), nil
}

// Open returns a reader of the object's bytes, which the caller closes,
// or ErrNotFound.
func (o *Objects) Open(ctx context.Context, name string) (io.ReadCloser, error) {
	rd, err := o.obs.Get(ctx, name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, fmt.Errorf("open object: %w", ErrNotFound)
	}
	if err != nil {
		return nil, classify("open object", err)
	}
	return rd, nil
}

// Get returns the object's bytes, or ErrNotFound.
func (o *Objects) Get(ctx context.Context, name string) ([]byte, error) {
	b, err := o.obs.GetBytes(ctx, name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, fmt.Errorf("get object: %w", ErrNotFound)
	}
	if err != nil {
		return nil, classify("get object", err)
	}
	return b, nil
}

// Delete removes the object and its chunks; an absent object is not an
// error.
func (o *Objects) Delete(ctx context.Context, name string) error {
	err := o.obs.Delete(ctx, name)
	if err == nil || errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil
	}
	return classify("delete object", err)
}

// List returns the info of every live object.
func (o *Objects) List(ctx context.Context) ([]ObjectInfo, error) {
	infos, err := o.obs.List(ctx)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil, nil
	}
	if err != nil {
		return nil, classify("list objects", err)
	}
	out := make([]ObjectInfo, 0, len(infos))
	for _, i := range infos {
		out = append(out, objectInfo(i))
	}
	return out, nil
}

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }
