//! The C ABI (`extern "C"`), the only unsafe boundary. Filled in by issue #5.
