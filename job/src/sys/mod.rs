//! Every `unsafe` of sode-job: the PMIx client library, loaded at run time,
//! the PMI socket a launcher leaves open, and the hook run at exit.

pub(crate) mod at_exit;
pub(crate) mod inherited;
pub(crate) mod pmix;
