package events

import (
	"time"

	"github.com/crosscheck/crosscheck/internal/apperr"
)

// BYOM host kinds: the wire protocol a customer-owned model speaks.
const (
	KindOpenAICompatible = "openai-compatible"
	KindOpenAI           = "openai"
	KindAnthropic        = "anthropic"
	KindGemini           = "gemini"
	KindAzureOpenAI      = "azure-openai"
)

// BYOMKinds lists the host kinds, in the order the docs give them.
var BYOMKinds = []string{KindOpenAICompatible, KindOpenAI, KindAnthropic, KindGemini, KindAzureOpenAI}

// BYOM states. A BYOM is active or unverified (saved without a passing
// connection test, at the caller's request) when queries may use it;
// disabled when its owner paused it; deleted is terminal.
const (
	BYOMActive     = "active"
	BYOMUnverified = "unverified"
	BYOMDisabled   = "disabled"
	BYOMDeleted    = "deleted"
)

// ProviderCustom is the provider of a customer-owned model in results.
const ProviderCustom = "custom"

// Capabilities are what a BYOM's owner declares it can do.
type Capabilities struct {
	Images           bool `json:"images"`
	PDF              bool `json:"pdf"`
	WebSearch        bool `json:"web_search"`
	StructuredOutput bool `json:"structured_output"`
	ContextWindow    int  `json:"context_window,omitempty"`
}

// Sealed is a secret encrypted under a key-encryption key: AES-256-GCM, the
// nonce before the ciphertext, base64. KeyID names the key that opens it.
type Sealed struct {
	KeyID      string `json:"key_id"`
	Ciphertext string `json:"ciphertext"`
}

// BYOMConnected records a customer-owned model connected to the account.
// The provider key and the header values are only in Secret, encrypted.
type BYOMConnected struct {
	ModelID      string       `json:"model_id"`
	Name         string       `json:"name"`
	Kind         string       `json:"kind"`
	BaseURL      string       `json:"base_url"`
	Model        string       `json:"model"`
	APIVersion   string       `json:"api_version,omitempty"`
	Capabilities Capabilities `json:"capabilities"`
	HeaderNames  []string     `json:"header_names,omitempty"`
	// State is active, or unverified when saved without a passing test.
	State  string  `json:"state"`
	Secret *Sealed `json:"secret,omitempty"`
}

// BYOMTested records a connection test of a connected BYOM.
type BYOMTested struct {
	ModelID string `json:"model_id"`
	OK      bool   `json:"ok"`
	// Class and Message say why a test failed: a short, scrubbed text.
	Class   string `json:"class,omitempty"`
	Message string `json:"message,omitempty"`
}

// BYOMStateChanged is one lifecycle transition of a BYOM.
type BYOMStateChanged struct {
	ModelID string `json:"model_id"`
	From    string `json:"from"`
	To      string `json:"to"`
}

// BYOMDisabledEv, BYOMEnabledEv and BYOMDeletedEv are the BYOM lifecycle
// events.
type (
	BYOMDisabledEv struct{ BYOMStateChanged }
	BYOMEnabledEv  struct{ BYOMStateChanged }
	BYOMDeletedEv  struct{ BYOMStateChanged }
)

// BYOMKeyRotated records a BYOM's secret encrypted again under another
// key-encryption key.
type BYOMKeyRotated struct {
	ModelID string `json:"model_id"`
	Secret  Sealed `json:"secret"`
}

func (BYOMConnected) EventName() string  { return "byom_connected" }
func (BYOMTested) EventName() string     { return "byom_tested" }
func (BYOMDisabledEv) EventName() string { return "byom_disabled" }
func (BYOMEnabledEv) EventName() string  { return "byom_enabled" }
func (BYOMDeletedEv) EventName() string  { return "byom_deleted" }
func (BYOMKeyRotated) EventName() string { return "byom_key_rotated" }

func init() {
	register(AggregateAccount,
		func() Event { return &BYOMConnected{} },
		func() Event { return &BYOMTested{} },
		func() Event { return &BYOMDisabledEv{} },
		func() Event { return &BYOMEnabledEv{} },
		func() Event { return &BYOMDeletedEv{} },
		func() Event { return &BYOMKeyRotated{} },
	)
}

// BYOM is one customer-owned model as the account aggregate knows it.
type BYOM struct {
	BYOMConnected
	// State is the current state; State of the embedded event the first.
	State     string
	CreatedAt time.Time
	// Tested is when the last connection test ran; LastTest its outcome.
	Tested   time.Time
	LastTest *BYOMTested
	// Verified says a connection test passed once, at connection or after.
	Verified bool
	Seq      uint64
}

// Usable reports whether queries may use the BYOM.
func (b *BYOM) Usable() bool { return b.State == BYOMActive || b.State == BYOMUnverified }

// applyBYOM folds a BYOM event into the account; it reports whether ev was one.
func (a *Account) applyBYOM(r Record) bool {
	switch e := r.Event.(type) {
	case BYOMConnected:
		if a.BYOMs == nil {
			a.BYOMs = map[string]*BYOM{}
		}
		a.BYOMs[e.ModelID] = &BYOM{BYOMConnected: e, State: e.State, CreatedAt: r.Envelope.Time, Verified: e.State == BYOMActive, Seq: r.Seq}
		a.BYOMOrder = append(a.BYOMOrder, e.ModelID)
	case BYOMTested:
		if b := a.BYOMs[e.ModelID]; b != nil {
			t := e
			b.LastTest, b.Tested, b.Seq = &t, r.Envelope.Time, r.Seq
			if e.OK {
				b.Verified = true
				if b.State == BYOMUnverified {
					b.State = BYOMActive
				}
			}
		}
	case BYOMDisabledEv:
		a.byomTo(e.BYOMStateChanged, r.Seq)
	case BYOMEnabledEv:
		a.byomTo(e.BYOMStateChanged, r.Seq)
	case BYOMDeletedEv:
		a.byomTo(e.BYOMStateChanged, r.Seq)
	case BYOMKeyRotated:
		if b := a.BYOMs[e.ModelID]; b != nil {
			s := e.Secret
			b.Secret, b.Seq = &s, r.Seq
		}
	default:
		return false
	}
	return true
}

func (a *Account) byomTo(ch BYOMStateChanged, seq uint64) {
	if b := a.BYOMs[ch.ModelID]; b != nil {
		b.State, b.Seq = ch.To, seq
	}
}

// BYOM actions of the admin API.
const (
	BYOMActionDisable = "disable"
	BYOMActionEnable  = "enable"
	BYOMActionDelete  = "delete"
)

// DecideBYOM decides the event for a lifecycle action on b: nil when b is
// already where the action leads; not_found for a deleted BYOM or an action
// it does not know. Enabling a BYOM whose connection never passed a test
// returns it to unverified, not active.
func DecideBYOM(b *BYOM, action string) (Event, error) {
	if b.State == BYOMDeleted {
		return nil, apperr.New(apperr.NotFound, "no model %q on this account", b.ModelID)
	}
	ch := func(to string) BYOMStateChanged { return BYOMStateChanged{ModelID: b.ModelID, From: b.State, To: to} }
	switch action {
	case BYOMActionDisable:
		if b.State == BYOMDisabled {
			return nil, nil
		}
		return BYOMDisabledEv{ch(BYOMDisabled)}, nil
	case BYOMActionEnable:
		if b.State != BYOMDisabled {
			return nil, nil
		}
		to := BYOMActive
		if !b.Verified {
			to = BYOMUnverified
		}
		return BYOMEnabledEv{ch(to)}, nil
	case BYOMActionDelete:
		return BYOMDeletedEv{ch(BYOMDeleted)}, nil
	}
	return nil, apperr.New(apperr.NotFound, "unknown model action %q: use disable, enable or test", action)
}
