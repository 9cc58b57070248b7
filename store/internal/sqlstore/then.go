package sqlstore

import (
	"encoding/json"
	"fmt"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
)

// thenJSON is the stored form of a job's follow-up (the jobs table's
// then_spec column): a store.NewJob without what a follow-up never has
// (id, idempotency key, request hash, trace context).
//
// The policy is stored as encoding/json writes a warren.Policy, by its Go
// field names, so that an option added to warren.Policy is carried into
// every follow-up with no change here; renaming a Policy field renames it
// here too, and needs a migration of then_spec.
type thenJSON struct {
	Type          string          `json:"type"`
	Policy        warren.Policy   `json:"policy"`
	Metadata      json.RawMessage `json:"metadata,omitempty"`
	WebhookURL    string          `json:"webhook_url,omitempty"`
	WebhookSecret string          `json:"webhook_secret,omitempty"`
	MaxTaskBytes  int64           `json:"max_task_bytes,omitempty"`
	MaxTasks      int64           `json:"max_tasks,omitempty"`
	Then          *thenJSON       `json:"then,omitempty"`
}

// EncodeThen returns the follow-up spec as the then_spec column stores
// it: nil (NULL) for a job without a follow-up.
func EncodeThen(spec *store.NewJob) ([]byte, error) {
	if spec == nil {
		return nil, nil
	}
	b, err := json.Marshal(thenOf(spec))
	if err != nil {
		return nil, fmt.Errorf("encode the follow-up: %w", err)
	}
	return b, nil
}

// thenOf is the stored form of spec and the follow-ups after it.
func thenOf(spec *store.NewJob) *thenJSON {
	if spec == nil {
		return nil
	}
	t := &thenJSON{Type: spec.Type, Policy: spec.Policy, Metadata: spec.Metadata,
		MaxTaskBytes: spec.MaxTaskBytes, MaxTasks: spec.MaxTasks, Then: thenOf(spec.Then)}
	if w := spec.Webhook; w != nil {
		t.WebhookURL, t.WebhookSecret = w.URL, w.Secret
	}
	return t
}

// DecodeThenSpec reads a then_spec column back into the spec EncodeThen
// was given, its webhook secrets included: nil for NULL.
func DecodeThenSpec(b []byte) (*store.NewJob, error) {
	t, err := decodeThen(b)
	if err != nil || t == nil {
		return nil, err
	}
	return t.spec(), nil
}

// spec is t as the store.NewJob it was encoded from.
func (t *thenJSON) spec() *store.NewJob {
	if t == nil {
		return nil
	}
	s := &store.NewJob{Type: t.Type, Policy: t.Policy, Metadata: t.Metadata, MaxTaskBytes: t.MaxTaskBytes, MaxTasks: t.MaxTasks, Then: t.Then.spec()}
	if t.WebhookURL != "" {
		s.Webhook = &store.Webhook{URL: t.WebhookURL, Secret: t.WebhookSecret}
	}
	return s
}

// DecodeThen reads a then_spec column as a job shows its follow-up
// (warren.Job.Then), without webhook secrets: nil for NULL.
func DecodeThen(b []byte) (*warren.FollowUp, error) {
	t, err := decodeThen(b)
	if err != nil || t == nil {
		return nil, err
	}
	return t.followUp(), nil
}

// followUp is t as a job shows it.
func (t *thenJSON) followUp() *warren.FollowUp {
	if t == nil {
		return nil
	}
	return &warren.FollowUp{Type: t.Type, Policy: t.Policy, Metadata: t.Metadata, WebhookURL: t.WebhookURL, Then: t.Then.followUp()}
}

// decodeThen parses a then_spec column: nil for NULL.
func decodeThen(b []byte) (*thenJSON, error) {
	if len(b) == 0 {
		return nil, nil
	}
	var t thenJSON
	if err := json.Unmarshal(b, &t); err != nil {
		return nil, fmt.Errorf("decode the follow-up: %w", err)
	}
	return &t, nil
}
