//! Every `unsafe` of sode-job: the PMIx client library, loaded at run time.

pub(crate) mod pmix;
