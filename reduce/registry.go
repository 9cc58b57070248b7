package reduce

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
)

// Registry holds reducers by name: the names jobs may give as their
// "reduce" policy. It is safe for concurrent use. Make one with
// NewRegistry; the zero Registry holds no reducers, not even the
// built-ins.
type Registry struct {
	mu        sync.RWMutex
	factories map[string]Factory
}

// NewRegistry returns a registry that holds the built-in reducers
// (collect, sum, concat, merge and none) and nothing else. Each call
// returns a registry of its own: what is registered in one is not seen by
// another.
func NewRegistry() *Registry {
	return &Registry{factories: map[string]Factory{
		"collect": func() Reducer { return &collectReducer{} },
		"sum":     func() Reducer { return &sumReducer{} },
		"concat":  func() Reducer { return &concatReducer{} },
		"merge":   func() Reducer { return &mergeReducer{} },
		"none":    func() Reducer { return noneReducer{} },
	}}
}

// Register makes f available to jobs under name. It returns an error, and
// changes nothing, when name is empty, f is nil, or name is already
// registered (built-ins included): a name means one reducer for as long
// as the registry lives.
func (reg *Registry) Register(name string, f Factory) error {
	if name == "" {
		return errors.New("reduce: Register: the reducer name is empty")
	}
	if f == nil {
		return fmt.Errorf("reduce: Register(%q): the Factory is nil", name)
	}
	reg.mu.Lock()
	defer reg.mu.Unlock()
	if _, dup := reg.factories[name]; dup {
		return fmt.Errorf("reduce: Register(%q): a reducer of that name is already registered", name)
	}
	if reg.factories == nil {
		reg.factories = make(map[string]Factory)
	}
	reg.factories[name] = f
	return nil
}

// Lookup returns the factory registered under name, and whether there is
// one.
func (reg *Registry) Lookup(name string) (Factory, bool) {
	reg.mu.RLock()
	defer reg.mu.RUnlock()
	f, ok := reg.factories[name]
	return f, ok
}

// Names returns the name of every reducer the registry holds, built-ins
// included, sorted. The slice is the caller's.
func (reg *Registry) Names() []string {
	reg.mu.RLock()
	defer reg.mu.RUnlock()
	return slices.Sorted(maps.Keys(reg.factories))
}
