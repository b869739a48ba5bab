package byom

import (
	"context"
	"encoding/json"
	"slices"

	"github.com/crosscheck/crosscheck/internal/events"
)

// Rotation is the outcome of a key rotation.
type Rotation struct {
	// KeyID is the key every secret is sealed under now.
	KeyID string `json:"key_id"`
	// Rotated counts the secrets sealed again; Failed lists the models
	// whose secret this process could not open (sealed under a key it does
	// not hold), left as they were.
	Rotated int      `json:"rotated"`
	Failed  []string `json:"failed"`
}

// Rotate makes a new current key-encryption key (see Keyring.Rotate) and
// seals every model's secret that is under another key again under it, one
// byom_key_rotated event each. Queries go on meanwhile: a secret opens under
// its old key until its event lands, under the new one after. Running it
// again finishes what an interrupted run left.
func (s *Service) Rotate(ctx context.Context) (Rotation, error) {
	current, err := s.Keyring.Rotate()
	if err != nil {
		return Rotation{}, err
	}
	out := Rotation{KeyID: current, Failed: []string{}}
	store := s.Accounts.Store
	recs, err := store.Load(ctx, store.Accounts, events.Subject(events.AggregateAccount, "*", events.BYOMConnected{}.EventName()), 1)
	if err != nil {
		return out, err
	}
	var accountIDs []string
	for _, r := range recs {
		if id := events.AggregateID(r.Envelope.Subject); !slices.Contains(accountIDs, id) {
			accountIDs = append(accountIDs, id)
		}
	}
	for _, accountID := range accountIDs {
		n := 0
		err := s.Accounts.Update(ctx, accountID, nil, s.Accounts.Refreshed(ctx, accountID), func(a *events.Account) ([]events.Event, error) {
			var evs []events.Event
			for _, id := range a.BYOMOrder {
				b := a.BYOMs[id]
				if b.State == events.BYOMDeleted || b.Secret == nil || b.Secret.KeyID == current {
					continue
				}
				conn, err := s.connection(accountID, b)
				if err != nil {
					if !slices.Contains(out.Failed, id) {
						out.Failed = append(out.Failed, id)
					}
					continue
				}
				plain, _ := json.Marshal(secret{APIKey: conn.APIKey, Headers: conn.Headers})
				sealed, err := s.Keyring.Seal(plain, aad(accountID, id))
				if err != nil {
					return nil, err
				}
				evs = append(evs, events.BYOMKeyRotated{ModelID: id, Secret: sealed})
			}
			n = len(evs) // decided again after a conflict: the last decision landed
			return evs, nil
		})
		if err != nil {
			return out, err
		}
		out.Rotated += n
	}
	return out, nil
}
