package tree

import "sync/atomic"

// TenantID is a compact handle for an interned tenant (worker) name.
// IDs are allocated densely from 0 and are never reused within a Tree.
type TenantID int32

// NoTenant is returned by Match when no eligible tenant holds any prefix of
// the text.
const NoTenant TenantID = -1

// Filter restricts which tenants Match may return. A nil Filter means every
// tenant is eligible. Eligible is called for every tenant entry on the
// matched path (and may be called again if a walk restarts), so it must be
// fast, side-effect free and safe for concurrent use.
type Filter interface {
	Eligible(TenantID) bool
}

type tenantState struct {
	name   string
	chars  atomic.Int64 // sum of chars of the nodes this tenant is on
	active atomic.Bool  // false after RemoveTenant until the next Tenant/Insert
}

// Tenant interns name and returns its ID, creating it if needed. It does not
// allocate when the tenant already exists. A tenant removed by RemoveTenant
// keeps its ID and is re-activated by Tenant.
func (t *Tree) Tenant(name string) TenantID {
	if id, ok := (*t.names.Load())[name]; ok {
		st := (*t.tenants.Load())[id]
		if !st.active.Load() {
			st.active.Store(true)
		}
		return id
	}
	t.tmu.Lock()
	defer t.tmu.Unlock()
	old := *t.names.Load()
	if id, ok := old[name]; ok {
		(*t.tenants.Load())[id].active.Store(true)
		return id
	}
	oldT := *t.tenants.Load()
	id := TenantID(len(oldT))
	st := &tenantState{name: name}
	st.active.Store(true)
	newT := make([]*tenantState, len(oldT)+1)
	copy(newT, oldT)
	newT[id] = st
	t.tenants.Store(&newT)
	m := make(map[string]TenantID, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	m[name] = id
	t.names.Store(&m)
	return id
}

// LookupTenant returns the ID of an already interned tenant without creating
// one. Removed tenants are still found (their IDs are stable).
func (t *Tree) LookupTenant(name string) (TenantID, bool) {
	id, ok := (*t.names.Load())[name]
	return id, ok
}

// TenantName returns the name of id, or "" if id is unknown.
func (t *Tree) TenantName(id TenantID) string {
	if st := t.state(id); st != nil {
		return st.name
	}
	return ""
}

func (t *Tree) state(id TenantID) *tenantState {
	ts := *t.tenants.Load()
	if id < 0 || int(id) >= len(ts) {
		return nil
	}
	return ts[id]
}
