const agent = new https.Agent({ rejectUnauthorized: false });
