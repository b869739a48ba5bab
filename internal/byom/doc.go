// Package byom holds customer-owned models (BYOM): connecting one to an
// account after a connection test, its lifecycle, the keyring that keeps its
// provider key only as AES-256-GCM ciphertext, and the model backend a query
// calls it through, over the egress guard.
package byom
