//! Webhooks called by a real API server.
