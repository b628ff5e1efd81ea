//! Every `unsafe` of sode-job: the PMIx client library, loaded at run time,
//! and the PMI socket a launcher leaves open.

pub(crate) mod inherited;
pub(crate) mod pmix;
