// Type-checks a few uses of the types openapi-typescript generates from
// openapi.yaml (schema.d.ts, made by ../check), under tsc --strict: the
// answers of acquire, the 409 and 429 problems, the listing, the
// Fencing-Token header typed as the body's fencing_token is, and the
// readers-writer lock's request, hold, mode-held problem and readers; a
// lock set's answer with a token per member, its 409 and its members.
import type { components, paths } from "./schema";

type Lock = paths["/locks/{resource}"];
type Acquired = Lock["put"]["responses"]["201"]["content"]["application/json"];
type AcquiredHeaders = Lock["put"]["responses"]["201"]["headers"];
type Taken = Lock["put"]["responses"]["409"]["content"]["application/problem+json"];
type TooMany = paths["/locks"]["get"]["responses"]["429"]["content"]["application/problem+json"];
type Listing = paths["/locks"]["get"]["responses"]["200"]["content"]["application/json"];

const lease: Acquired = {
  resource: "invoice-42",
  lease_id: "0123456789abcdef",
  fencing_token: 7,
  ttl_ms: 30000,
  validity_ms: 29697,
  expires_at: "2026-01-01T00:00:00Z",
};
const token: AcquiredHeaders["Fencing-Token"] = lease.fencing_token;
const taken: Taken = { type: "urn:lockgate:problem:lock-taken", title: "Lock held by another lease", status: 409, retry_after_ms: 1200 };
const limited: TooMany = { type: "urn:lockgate:problem:rate-limited", title: "Rate limit exceeded", status: 429 };
const page: Listing = { locks: [{ resource: "a", fencing_token: token, owner: "", ttl_ms: 1, expires_at: "2026-01-01T00:00:00Z" }] };
const extend: components["schemas"]["ExtendRequest"] = { ttl_ms: 60000 };

type RWLock = paths["/rwlocks/{resource}"];
const readerAsk: components["schemas"]["RWAcquireRequest"] = { mode: "shared", ttl_ms: 30000 };
const reader: RWLock["put"]["responses"]["201"]["content"]["application/json"] = { ...lease, resource: "ledger", mode: "shared" };
const modeHeld: RWLock["put"]["responses"]["409"]["content"]["application/problem+json"] = { type: "urn:lockgate:problem:mode-held", title: "Lease holds the lock in the other mode", status: 409 };
const readers: RWLock["get"]["responses"]["200"]["content"]["application/json"] = {
  resource: "ledger",
  mode: "shared",
  writer_waiting: true,
  holders: [{ mode: "shared", fencing_token: reader.fencing_token, owner: "", ttl_ms: 30000, expires_at: "2026-01-01T00:00:00Z" }],
};

type LockSet = paths["/locksets/{resources}"];
const set: LockSet["put"]["responses"]["201"]["content"]["application/json"] = {
  resources: "invoices,ledger",
  lease_id: "0123456789abcdef",
  ttl_ms: 30000,
  validity_ms: 29697,
  expires_at: "2026-01-01T00:00:00Z",
  members: [{ resource: "invoices", fencing_token: token }, { resource: "ledger", fencing_token: 12 }],
};
const setTaken: LockSet["put"]["responses"]["409"]["content"]["application/problem+json"] = { type: "urn:lockgate:problem:lock-taken", title: "Lock held by another lease", status: 409, detail: "another lease holds ledger" };
const setMembers: LockSet["get"]["responses"]["200"]["content"]["application/json"] = {
  resources: set.resources,
  members: [{ resource: "invoices", held: true, fencing_token: 7, owner: "", ttl_ms: 30000, expires_at: "2026-01-01T00:00:00Z" }, { resource: "ledger", held: false }],
};

export const uses = [lease, taken, limited, page, extend, readerAsk, reader, modeHeld, readers, set, setTaken, setMembers];
