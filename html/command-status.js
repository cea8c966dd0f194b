// A command's status (its article's data-status) in two sets: still to
// finish, and finished.

export const ACTIVE = new Set(["pending", "claimed", "running"]);
export const FINISHED = new Set(["done", "failed", "cancelled"]);
