package semaphore

import "github.com/lockgate/lockgate/lockcore"

// InUse returns how many permits granted or extended through these
// Semaphores are held: not released through them and not past their
// validity.
func (s *Semaphores) InUse() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	for k, t := range s.inUse {
		if !now.Before(t.expires) {
			delete(s.inUse, k)
		}
	}
	return len(s.inUse)
}

func (s *Semaphores) track(l *lockcore.Lease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.inUse[l.Resource] = tracked{lease: l.ID, expires: now.Add(l.Validity)}
	if len(s.inUse) >= s.pruneAt {
		for k, t := range s.inUse {
			if !now.Before(t.expires) {
				delete(s.inUse, k)
			}
		}
		s.pruneAt = max(2*len(s.inUse), minPrune)
	}
}

// minPrune is the smallest size of inUse at which track prunes it: the
// map holds at most twice the permits in use, or minPrune entries.
const minPrune = 256

// untrack forgets the permit on resource if lease holds it: a release that
// handed the permit to a waiter answers after the waiter's grant.
func (s *Semaphores) untrack(resource, lease string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inUse[resource].lease == lease {
		delete(s.inUse, resource)
	}
}
